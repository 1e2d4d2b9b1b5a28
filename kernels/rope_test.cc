// RopeInvFrequencies (plain and Llama 3.1 scaled) against values computed here in f64,
// RopeCache, and Rope in both pairings over dtypes, layouts, position forms and aliasing.
#include <cmath>
#include <tuple>
#include <vector>

#include "core/random.h"
#include "gtest/gtest.h"
#include "kernels/cpu/op_test_util.h"
#include "kernels/ops.h"

namespace cctune {
namespace {

using testing::EmptyLike;
using testing::ExpectClose;
using testing::Layout;
using testing::Randn;
using testing::Roundoff;
using testing::SubnormalStep;
using testing::Values;
using testing::WithLayout;

TEST(RopeInvFrequenciesTest, MatchesPowerLaw) {
  for (int64_t hd : {2, 8, 64, 128}) {
    for (double base : {10000.0, 500000.0}) {
      const Tensor t = ValueOrDie(ops::RopeInvFrequencies(hd, base));
      ASSERT_EQ(t.shape(), (Shape{hd / 2}));
      ASSERT_EQ(t.dtype(), DType::kF32);
      std::vector<double> want(hd / 2);
      for (int64_t i = 0; i < hd / 2; ++i) want[i] = 1.0 / std::pow(base, 2.0 * i / hd);
      // f32 evaluation: a few ulp of f32.
      ExpectClose(Values(t), want, {0.0}, 4e-7, absl::StrCat("h_d ", hd, " base ", base));
    }
  }
}

// Llama 3.1's rule written out in f64, independently of the f32 kernel.
std::vector<double> Llama31Reference(int64_t hd, double base, const ops::RopeScaling& s) {
  std::vector<double> out(hd / 2);
  const double low_wavelen = s.original_max_position_embeddings / s.low_freq_factor;
  const double high_wavelen = s.original_max_position_embeddings / s.high_freq_factor;
  for (int64_t i = 0; i < hd / 2; ++i) {
    const double freq = 1.0 / std::pow(base, 2.0 * i / hd);
    const double wavelen = 2 * M_PI / freq;
    if (wavelen < high_wavelen) {
      out[i] = freq;
    } else if (wavelen > low_wavelen) {
      out[i] = freq / s.factor;
    } else {
      const double smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) /
                            (s.high_freq_factor - s.low_freq_factor);
      out[i] = (1 - smooth) * freq / s.factor + smooth * freq;
    }
  }
  return out;
}

TEST(RopeInvFrequenciesTest, Llama31ScalingMatchesF64Rule) {
  const ops::RopeScaling llama31;  // factor 8, low 1, high 4, 8192: Llama 3.1's values
  ops::RopeScaling other_mut;
  other_mut.factor = 32;
  other_mut.low_freq_factor = 1;
  other_mut.high_freq_factor = 4;
  other_mut.original_max_position_embeddings = 4096;
  const ops::RopeScaling other = other_mut;
  for (const ops::RopeScaling* s : {&llama31, &other}) {
    for (int64_t hd : {64, 128}) {
      const Tensor t = ValueOrDie(ops::RopeInvFrequencies(hd, 500000.0, s));
      const auto want = Llama31Reference(hd, 500000.0, *s);
      ExpectClose(Values(t), want, {0.0}, 2e-6,
                  absl::StrCat("scaled h_d ", hd, " factor ", s->factor));
      // All three regimes occur: unchanged, divided by the factor, and smoothed.
      const auto plain = Values(ValueOrDie(ops::RopeInvFrequencies(hd, 500000.0)));
      const auto got = Values(t);
      int same = 0, divided = 0, smoothed = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        if (got[i] == plain[i]) {
          ++same;
        } else if (std::fabs(got[i] * s->factor / plain[i] - 1) < 1e-6) {
          ++divided;
        } else {
          ++smoothed;
        }
      }
      EXPECT_GT(same, 0);
      EXPECT_GT(divided, 0);
      EXPECT_GT(smoothed, 0);
    }
  }
}

TEST(RopeInvFrequenciesTest, RejectsBadArguments) {
  absl::Status st = ops::RopeInvFrequencies(7, 10000.0).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("head_dim (7) must be even"), std::string::npos) << st;
  st = ops::RopeInvFrequencies(8, -1.0).status();
  EXPECT_NE(st.message().find("base (-1)"), std::string::npos) << st;
  ops::RopeScaling bad;
  bad.high_freq_factor = 1.0;
  st = ops::RopeInvFrequencies(8, 10000.0, &bad).status();
  EXPECT_NE(st.message().find("high_freq_factor (1)"), std::string::npos) << st;
}

TEST(RopeCacheTest, TablesMatchCosSinOfF32Angles) {
  const int64_t hd = 16, len = 300;
  const Tensor inv = ValueOrDie(ops::RopeInvFrequencies(hd, 10000.0));
  Tensor cos = ValueOrDie(Tensor::Empty({len, hd / 2}, DType::kF32));
  Tensor sin = testing::EmptyLike({len, hd / 2}, DType::kF32, Layout::kTransposed);
  ASSERT_TRUE(ops::RopeCache(cos, sin, inv).ok());
  const auto th = Values(inv), vc = Values(cos), vs = Values(sin);
  std::vector<double> wc(vc.size()), ws(vs.size());
  for (int64_t p = 0; p < len; ++p) {
    for (int64_t i = 0; i < hd / 2; ++i) {
      // The angle is p·theta rounded to f32 (torchtune's einsum in f32).
      const double angle = static_cast<float>(p) * static_cast<float>(th[i]);
      wc[p * hd / 2 + i] = std::cos(angle);
      ws[p * hd / 2 + i] = std::sin(angle);
    }
  }
  ExpectClose(vc, wc, {1e-7}, 0.0, "cos");
  ExpectClose(vs, ws, {1e-7}, 0.0, "sin");
  Tensor bad = ValueOrDie(Tensor::Empty({len, hd}, DType::kF32));
  const absl::Status st = ops::RopeCache(bad, sin, inv);
  EXPECT_NE(st.message().find("RopeCache: cos has shape [300, 16]; expected [300, 8]"),
            std::string::npos)
      << st;
}

// x [b, s, n, hd] rotated by positions; reference in f64 from the f32 tables.
std::vector<double> RopeReference(const std::vector<double>& x, const std::vector<double>& cos,
                                  const std::vector<double>& sin, const std::vector<int64_t>& pos,
                                  bool per_batch, int64_t b, int64_t s, int64_t n, int64_t hd,
                                  ops::RopePairing pairing) {
  std::vector<double> out(x.size());
  const int64_t half = hd / 2;
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t si = 0; si < s; ++si) {
      const int64_t p = pos[per_batch ? bi * s + si : si];
      for (int64_t h = 0; h < n; ++h) {
        const int64_t base = ((bi * s + si) * n + h) * hd;
        for (int64_t i = 0; i < half; ++i) {
          const int64_t i0 = pairing == ops::RopePairing::kInterleaved ? 2 * i : i;
          const int64_t i1 = pairing == ops::RopePairing::kInterleaved ? 2 * i + 1 : i + half;
          const double c = cos[p * half + i], sn = sin[p * half + i];
          out[base + i0] = x[base + i0] * c - x[base + i1] * sn;
          out[base + i1] = x[base + i1] * c + x[base + i0] * sn;
        }
      }
    }
  }
  return out;
}

class RopeTest : public ::testing::TestWithParam<std::tuple<DType, Layout, ops::RopePairing>> {};

TEST_P(RopeTest, MatchesReference) {
  const auto [dt, layout, pairing] = GetParam();
  Generator gen(51);
  const int64_t len = 64;
  for (int64_t hd : {2, 6, 32}) {
    const Tensor inv_h = ValueOrDie(ops::RopeInvFrequencies(hd, 10000.0));
    Tensor cos = ValueOrDie(Tensor::Empty({len, hd / 2}, DType::kF32));
    Tensor sin = ValueOrDie(Tensor::Empty({len, hd / 2}, DType::kF32));
    ASSERT_TRUE(ops::RopeCache(cos, sin, inv_h).ok());
    for (const Shape& s : std::vector<Shape>{{1, 1, 1, hd}, {2, 5, 3, hd}, {3, 1, 4, hd}}) {
      for (bool per_batch : {false, true}) {
        for (DType pt : {DType::kI32, DType::kI64}) {
          const int64_t b = s[0], sl = s[1], n = s[2];
          std::vector<int64_t> pv(per_batch ? b * sl : sl);
          for (int64_t& p : pv) p = static_cast<int64_t>(gen.UniformInt(len));
          pv[0] = len - 1;
          const Shape ps = per_batch ? Shape{b, sl} : Shape{sl};
          const Tensor pos = WithLayout(
              ValueOrDie(Tensor::FromVector(absl::Span<const int64_t>(pv), ps, pt)), layout);
          const Tensor x = WithLayout(Randn(s, dt, gen), layout);
          Tensor out = EmptyLike(s, dt, layout);
          ASSERT_TRUE(ops::Rope(out, x, cos, sin, pos, pairing).ok());
          const auto want = RopeReference(Values(x), Values(cos), Values(sin), pv, per_batch, b, sl,
                                          n, hd, pairing);
          ExpectClose(Values(out), want, {1e-6 + SubnormalStep(dt)}, 2 * Roundoff(dt),
                      absl::StrCat("Rope x ", ShapeToString(s), per_batch ? " pos [b, s]" : "", " ",
                                   DTypeName(pt)));
        }
      }
    }
  }
}

TEST_P(RopeTest, InPlaceOnAQueryLayoutView) {
  // x as modules produce it: [b, s, n, hd] viewed from a [b, n, s, hd]-shaped buffer.
  const auto [dt, layout, pairing] = GetParam();
  Generator gen(52);
  const int64_t b = 2, sl = 7, n = 3, hd = 8, len = 16;
  const Tensor inv = ValueOrDie(ops::RopeInvFrequencies(hd, 500000.0));
  Tensor cos = ValueOrDie(Tensor::Empty({len, hd / 2}, DType::kF32));
  Tensor sin = ValueOrDie(Tensor::Empty({len, hd / 2}, DType::kF32));
  ASSERT_TRUE(ops::RopeCache(cos, sin, inv).ok());
  Tensor buf = Randn({b, n, sl, hd}, dt, gen);
  Tensor x = ValueOrDie(buf.Transpose(1, 2));
  std::vector<int64_t> pv(sl);
  for (int64_t i = 0; i < sl; ++i) pv[i] = 3 + i;
  const Tensor pos = ValueOrDie(Tensor::FromVector(absl::Span<const int64_t>(pv), {sl}));
  const auto want =
      RopeReference(Values(x), Values(cos), Values(sin), pv, false, b, sl, n, hd, pairing);
  ASSERT_TRUE(ops::Rope(x, x, cos, sin, pos, pairing).ok());
  ExpectClose(Values(x), want, {1e-6 + SubnormalStep(dt)}, 2 * Roundoff(dt), "Rope in place");
}

INSTANTIATE_TEST_SUITE_P(DTypes, RopeTest,
                         ::testing::Combine(::testing::ValuesIn(testing::kFloatTypes),
                                            ::testing::ValuesIn(testing::kAllLayouts),
                                            ::testing::Values(ops::RopePairing::kInterleaved,
                                                              ops::RopePairing::kHalfSplit)),
                         [](const ::testing::TestParamInfo<RopeTest::ParamType>& info) {
                           return absl::StrCat(
                               DTypeName(std::get<0>(info.param)), "_",
                               testing::LayoutName(std::get<1>(info.param)), "_",
                               std::get<2>(info.param) == ops::RopePairing::kInterleaved
                                   ? "interleaved"
                                   : "half_split");
                         });

TEST(RopeErrorsTest, MessagesNameTheOffendingValues) {
  Generator gen(53);
  const int64_t len = 8;
  const Tensor inv = ValueOrDie(ops::RopeInvFrequencies(4, 10000.0));
  Tensor cos = ValueOrDie(Tensor::Empty({len, 2}, DType::kF32));
  Tensor sin = ValueOrDie(Tensor::Empty({len, 2}, DType::kF32));
  ASSERT_TRUE(ops::RopeCache(cos, sin, inv).ok());
  Tensor x = Randn({1, 3, 2, 4}, DType::kF32, gen);
  const auto before = Values(x);
  const Tensor far = ValueOrDie(Tensor::FromVector(std::vector<int64_t>{0, 8, 1}, {3}));
  absl::Status st = ops::Rope(x, x, cos, sin, far, ops::RopePairing::kInterleaved);
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange) << st;
  EXPECT_NE(st.message().find("Rope: position 8 at index 1"), std::string::npos) << st;
  EXPECT_EQ(Values(x), before);  // nothing written
  const Tensor pos2 = ValueOrDie(Tensor::FromVector(std::vector<int64_t>{0, 1}, {2}));
  st = ops::Rope(x, x, cos, sin, pos2, ops::RopePairing::kInterleaved);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("Rope: positions has shape [2]; expected [b, s] = [1, 3] or [s]"),
            std::string::npos)
      << st;
  Tensor odd = Randn({1, 3, 2, 5}, DType::kF32, gen);
  st = ops::Rope(odd, odd, cos, sin, far, ops::RopePairing::kHalfSplit);
  EXPECT_NE(st.message().find("Rope: h_d (5) of x must be even"), std::string::npos) << st;
  Tensor x3 = Randn({3, 2, 4}, DType::kF32, gen);
  st = ops::Rope(x3, x3, cos, sin, far, ops::RopePairing::kHalfSplit);
  EXPECT_NE(st.message().find("Rope: x has shape [3, 2, 4] (3-d); expected 4-d [b, s, n, h_d]"),
            std::string::npos)
      << st;
}

}  // namespace
}  // namespace cctune
