// RopeBackward against fp64 central finite differences of an fp64 rotation that reads the same
// cos/sin tables: both pairings, [s] and [b, s] positions, strided views, in place, and errors.
#include <tuple>
#include <vector>

#include "core/random.h"
#include "gtest/gtest.h"
#include "kernels/cpu/op_test_util.h"
#include "kernels/ops.h"

namespace cctune {
namespace {

using testing::ExpectGradClose;
using testing::Layout;
using testing::NumericGradient;
using testing::Randn;
using testing::Values;
using testing::WithLayout;

// fp64 loss sum(dy · rope(x)) for x [b, s, n, hd] with cos/sin [max_len, hd/2] values.
double RopeLoss(const std::vector<double>& x, const std::vector<double>& dy,
                const std::vector<double>& cos, const std::vector<double>& sin,
                const std::vector<int64_t>& pos, bool per_batch, int64_t b, int64_t s, int64_t n,
                int64_t hd, ops::RopePairing pairing) {
  const int64_t half = hd / 2;
  double loss = 0;
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t si = 0; si < s; ++si) {
      const int64_t p = pos[per_batch ? bi * s + si : si];
      for (int64_t h = 0; h < n; ++h) {
        const int64_t base = ((bi * s + si) * n + h) * hd;
        for (int64_t i = 0; i < half; ++i) {
          const int64_t i0 = pairing == ops::RopePairing::kInterleaved ? 2 * i : i;
          const int64_t i1 = pairing == ops::RopePairing::kInterleaved ? 2 * i + 1 : i + half;
          const double c = cos[p * half + i], sn = sin[p * half + i];
          const double x0 = x[base + i0], x1 = x[base + i1];
          loss += dy[base + i0] * (x0 * c - x1 * sn) + dy[base + i1] * (x1 * c + x0 * sn);
        }
      }
    }
  }
  return loss;
}

class RopeBackwardTest : public ::testing::TestWithParam<std::tuple<ops::RopePairing, Layout>> {};

TEST_P(RopeBackwardTest, MatchesFiniteDifferences) {
  const auto [pairing, layout] = GetParam();
  Generator gen(401);
  const int64_t max_len = 40;
  struct Case {
    int64_t b, s, n, hd;
  };
  for (const Case& c : {Case{1, 1, 1, 2}, Case{2, 5, 3, 8}, Case{1, 7, 2, 6}, Case{2, 3, 4, 16}}) {
    const Tensor inv = ValueOrDie(ops::RopeInvFrequencies(c.hd, 10000.0));
    Tensor cos = ValueOrDie(Tensor::Empty({max_len, c.hd / 2}, DType::kF32));
    Tensor sin = ValueOrDie(Tensor::Empty({max_len, c.hd / 2}, DType::kF32));
    ASSERT_TRUE(ops::RopeCache(cos, sin, inv).ok());
    for (bool per_batch : {false, true}) {
      for (bool in_place : {false, true}) {
        std::vector<int64_t> pos(per_batch ? c.b * c.s : c.s);
        for (int64_t& p : pos) p = static_cast<int64_t>(gen.UniformInt(max_len));
        const Tensor positions =
            ValueOrDie(Tensor::FromVector(pos, per_batch ? Shape{c.b, c.s} : Shape{c.s}));
        const Shape shape{c.b, c.s, c.n, c.hd};
        Tensor dy = WithLayout(Randn(shape, DType::kF32, gen), layout);
        const auto vdy = Values(dy);
        Tensor dx = in_place ? dy : WithLayout(Randn(shape, DType::kF32, gen), layout);
        ASSERT_TRUE(ops::RopeBackward(dx, dy, cos, sin, positions, pairing).ok());
        const auto vc = Values(cos), vs = Values(sin);
        const auto want = NumericGradient(
            [&](const std::vector<double>& x) {
              return RopeLoss(x, vdy, vc, vs, pos, per_batch, c.b, c.s, c.n, c.hd, pairing);
            },
            Values(Randn(shape, DType::kF32, gen)));
        ExpectGradClose(Values(dx), want, 1e-5,
                        absl::StrCat("dx (written) ", ShapeToString(shape),
                                     per_batch ? " [b, s] positions" : " [s] positions",
                                     in_place ? " in place" : ""));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Pairings, RopeBackwardTest,
                         ::testing::Combine(::testing::Values(ops::RopePairing::kInterleaved,
                                                              ops::RopePairing::kHalfSplit),
                                            ::testing::ValuesIn(testing::kAllLayouts)),
                         [](const ::testing::TestParamInfo<RopeBackwardTest::ParamType>& info) {
                           return absl::StrCat(
                               std::get<0>(info.param) == ops::RopePairing::kInterleaved
                                   ? "interleaved"
                                   : "half_split",
                               "_", testing::LayoutName(std::get<1>(info.param)));
                         });

TEST(RopeBackwardTest, RoundTripsTheForward) {
  // The backward is the inverse rotation: RopeBackward(Rope(x)) = x.
  Generator gen(402);
  const Tensor inv = ValueOrDie(ops::RopeInvFrequencies(32, 500000.0));
  Tensor cos = ValueOrDie(Tensor::Empty({64, 16}, DType::kF32));
  Tensor sin = ValueOrDie(Tensor::Empty({64, 16}, DType::kF32));
  ASSERT_TRUE(ops::RopeCache(cos, sin, inv).ok());
  const Tensor positions = ValueOrDie(Tensor::FromVector(std::vector<int64_t>{3, 17, 63}, {3}));
  const Tensor x = Randn({2, 3, 4, 32}, DType::kF32, gen);
  Tensor y = ValueOrDie(Tensor::Empty(x.shape(), DType::kF32));
  ASSERT_TRUE(ops::Rope(y, x, cos, sin, positions, ops::RopePairing::kHalfSplit).ok());
  ASSERT_TRUE(ops::RopeBackward(y, y, cos, sin, positions, ops::RopePairing::kHalfSplit).ok());
  testing::ExpectClose(Values(y), Values(x), {1e-6}, 1e-6, "inverse rotation");
}

TEST(RopeBackwardTest, RejectsBadArguments) {
  Generator gen(403);
  Tensor cos = Randn({8, 4}, DType::kF32, gen), sin = Randn({8, 4}, DType::kF32, gen);
  const Tensor positions = ValueOrDie(Tensor::FromVector(std::vector<int64_t>{0, 9}, {2}));
  Tensor dy = Randn({1, 2, 1, 8}, DType::kF32, gen);
  Tensor dx = Randn({1, 2, 1, 8}, DType::kF32, gen);
  absl::Status st = ops::RopeBackward(dx, dy, cos, sin, positions, ops::RopePairing::kInterleaved);
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange) << st;
  EXPECT_NE(st.message().find("RopeBackward: position 9 at index 1"), std::string::npos) << st;
  Tensor dx_bad = Randn({1, 2, 1, 6}, DType::kF32, gen);
  const Tensor ok_pos = ValueOrDie(Tensor::FromVector(std::vector<int64_t>{0, 1}, {2}));
  st = ops::RopeBackward(dx_bad, dy, cos, sin, ok_pos, ops::RopePairing::kInterleaved);
  EXPECT_NE(st.message().find("dx has shape [1, 2, 1, 6]; expected [1, 2, 1, 8]"),
            std::string::npos)
      << st;
}

}  // namespace
}  // namespace cctune
