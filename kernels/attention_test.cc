// Attention against an fp64 reference: MHA, GQA and MQA; causal, explicit masks and both;
// s_q < s_kv (decode and chunked prefill) and s_q > s_kv; fully masked rows; custom scale;
// every float dtype and strided views (module layouts, cache slices); split-key decode;
// prefill lengths (512+) at GQA ratios 1, 2, 4, 8; the bf16 dot-product route, to its bound.
#include <omp.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "core/random.h"
#include "gtest/gtest.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/gemm/gemm.h"
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

struct Dims {
  int64_t b, n_h, n_kv, s_q, s_kv, hd;
};

std::string DimsName(const Dims& d) {
  return absl::StrCat("b", d.b, " n_h", d.n_h, " n_kv", d.n_kv, " s_q", d.s_q, " s_kv", d.s_kv,
                      " h_d", d.hd);
}

// fp64 attention over row-major values; `mag` gets the tolerance scale of each output, and
// `mag_bf16` (when not null) sum_j p_j·|v_j| · (1 + max_j scale·sum_e |q_e·k_je|), the scale of
// the bf16 route's error (cpu::AttentionRoundsToBf16).
std::vector<double> Reference(const Dims& d, const std::vector<double>& q,
                              const std::vector<double>& k, const std::vector<double>& v,
                              const std::vector<double>* mask, bool causal, double scale,
                              std::vector<double>* mag, std::vector<double>* mag_bf16 = nullptr) {
  std::vector<double> out(d.b * d.n_h * d.s_q * d.hd, 0.0);
  mag->assign(out.size(), 0.0);
  if (mag_bf16 != nullptr) mag_bf16->assign(out.size(), 0.0);
  const int64_t g = d.n_h / d.n_kv;
  std::vector<double> s(d.s_kv);
  std::vector<bool> allowed(d.s_kv);
  for (int64_t bi = 0; bi < d.b; ++bi) {
    for (int64_t h = 0; h < d.n_h; ++h) {
      const int64_t kvh = h / g;
      for (int64_t i = 0; i < d.s_q; ++i) {
        const double* qr = &q[((bi * d.n_h + h) * d.s_q + i) * d.hd];
        const int64_t pos = d.s_kv - d.s_q + i;
        double mx = -INFINITY, smax = 0, sabs = 0;
        for (int64_t j = 0; j < d.s_kv; ++j) {
          allowed[j] = (!causal || j <= pos) &&
                       (mask == nullptr || (*mask)[(bi * d.s_q + i) * d.s_kv + j] != 0);
          const double* kr = &k[((bi * d.n_kv + kvh) * d.s_kv + j) * d.hd];
          double dot = 0, dot_abs = 0;
          for (int64_t e = 0; e < d.hd; ++e) {
            dot += qr[e] * kr[e];
            dot_abs += std::fabs(qr[e] * kr[e]);
          }
          s[j] = dot * scale;
          if (allowed[j]) {
            mx = std::max(mx, s[j]);
            smax = std::max(smax, std::fabs(s[j]));
            sabs = std::max(sabs, dot_abs * std::fabs(scale));
          }
        }
        if (mx == -INFINITY) continue;  // nothing allowed: zeros
        double sum = 0;
        for (int64_t j = 0; j < d.s_kv; ++j) sum += allowed[j] ? std::exp(s[j] - mx) : 0.0;
        double* o = &out[((bi * d.n_h + h) * d.s_q + i) * d.hd];
        double* m = &(*mag)[((bi * d.n_h + h) * d.s_q + i) * d.hd];
        for (int64_t j = 0; j < d.s_kv; ++j) {
          if (!allowed[j]) continue;
          const double p = std::exp(s[j] - mx) / sum;
          const double* vr = &v[((bi * d.n_kv + kvh) * d.s_kv + j) * d.hd];
          for (int64_t e = 0; e < d.hd; ++e) {
            o[e] += p * vr[e];
            m[e] += p * std::fabs(vr[e]) * (1 + smax);
            if (mag_bf16 != nullptr) {
              (*mag_bf16)[((bi * d.n_h + h) * d.s_q + i) * d.hd + e] +=
                  p * std::fabs(vr[e]) * (1 + sabs);
            }
          }
        }
      }
    }
  }
  return out;
}

Tensor RandomMask(int64_t b, int64_t s_q, int64_t s_kv, Generator& gen, bool one_empty_row) {
  std::vector<float> m(b * s_q * s_kv);
  for (float& x : m) x = gen.Uniform() < 0.6f ? 1.f : 0.f;
  if (one_empty_row) {
    for (int64_t j = 0; j < s_kv; ++j) m[(s_q - 1) * s_kv + j] = 0.f;  // batch 0, last row
  }
  return ValueOrDie(Tensor::FromVector(m, {b, s_q, s_kv}, DType::kBool));
}

// Runs ops::Attention on (q, k, v) as given and checks it against the reference: to f32
// roundoff, or where cpu::AttentionRoundsToBf16 to its bound (twice the first-order bound
// attention.h gives: 2^-7 · (1 + max_j scale·sum_e |q_e·k_je|) · sum_j p_j·|v_j|).
void Check(const Dims& d, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
           const ops::AttentionOptions& opt, const std::string& what) {
  ASSERT_TRUE(ops::Attention(out, q, k, v, opt).ok()) << what;
  std::vector<double> mask_values;
  if (opt.mask != nullptr) mask_values = Values(*opt.mask);
  const double scale = opt.scale != 0.f ? opt.scale : 1.0 / std::sqrt(static_cast<double>(d.hd));
  std::vector<double> mag, mag_bf16;
  const auto want = Reference(d, Values(q), Values(k), Values(v), opt.mask ? &mask_values : nullptr,
                              opt.causal, scale, &mag, &mag_bf16);
  const DType ot = out.dtype();
  const bool bf16 = cpu::AttentionRoundsToBf16(q, k, v);
  for (size_t i = 0; i < mag.size(); ++i) {
    mag[i] = 2e-6 * mag[i] + SubnormalStep(ot) + (bf16 ? 0x1p-7 * mag_bf16[i] : 0.0);
  }
  ExpectClose(Values(out), want, mag, 2 * Roundoff(ot), what + (bf16 ? " (bf16 route)" : ""));
}

class AttentionTest : public ::testing::TestWithParam<std::tuple<DType, Layout>> {};

TEST_P(AttentionTest, MatchesReference) {
  const auto [dt, layout] = GetParam();
  Generator gen(61);
  const std::vector<Dims> dims = {
      {2, 4, 4, 5, 5, 16},     // MHA
      {1, 6, 2, 7, 7, 8},      // GQA, 3 query heads per kv head
      {2, 4, 1, 3, 3, 33},     // MQA, odd h_d
      {1, 8, 2, 1, 300, 64},   // decode
      {2, 4, 2, 5, 19, 16},    // chunked prefill: s_q < s_kv
      {1, 2, 1, 9, 4, 8},      // s_q > s_kv: causal leaves the first rows empty
      {1, 2, 2, 100, 100, 4},  // several query tiles and key blocks
      {1, 4, 2, 70, 130, 32},  // the tile GEMMs (>= 8 rows, h_d >= 32): tiles, key blocks
      {2, 6, 2, 77, 77, 48},   // the register kernels (h_d whole vectors): 3 = 2 + 1 chunks
      {1, 6, 2, 9, 140, 64},   // the register kernels: rows not a multiple of 4, s_q < s_kv
      {1, 4, 1, 12, 5, 40},    // the tile GEMMs with rows that see no key (s_q > s_kv)
      {1, 1, 1, 1, 1, 1},
  };
  for (const Dims& d : dims) {
    const Tensor q = WithLayout(Randn({d.b, d.n_h, d.s_q, d.hd}, dt, gen), layout);
    const Tensor k = WithLayout(Randn({d.b, d.n_kv, d.s_kv, d.hd}, dt, gen), layout);
    const Tensor v = WithLayout(Randn({d.b, d.n_kv, d.s_kv, d.hd}, dt, gen), layout);
    const Tensor mask = RandomMask(d.b, d.s_q, d.s_kv, gen, /*one_empty_row=*/true);
    for (int variant = 0; variant < 5; ++variant) {
      ops::AttentionOptions opt;
      std::string name = DimsName(d);
      switch (variant) {
        case 0:
          name += " plain";
          break;
        case 1:
          opt.causal = true;
          name += " causal";
          break;
        case 2:
          opt.mask = &mask;
          name += " mask";
          break;
        case 3:
          opt.mask = &mask;
          opt.causal = true;
          name += " causal+mask";
          break;
        case 4:
          opt.scale = 0.37f;
          opt.causal = true;
          name += " scale 0.37";
          break;
      }
      Tensor out = EmptyLike(q.shape(), dt, layout);
      Check(d, q, k, v, out, opt, name);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, AttentionTest,
                         ::testing::Combine(::testing::ValuesIn(testing::kFloatTypes),
                                            ::testing::ValuesIn(testing::kAllLayouts)),
                         [](const ::testing::TestParamInfo<AttentionTest::ParamType>& info) {
                           return absl::StrCat(DTypeName(std::get<0>(info.param)), "_",
                                               testing::LayoutName(std::get<1>(info.param)));
                         });

TEST(AttentionLayoutTest, ModuleLayoutsAndCacheSlices) {
  // q from a [b, s, n_h, h_d] projection transposed to [b, n_h, s, h_d]; k/v the filled part of
  // a [b, n_kv, max_s, h_d] cache (Narrow), in bf16; out written into a transposed view.
  Generator gen(62);
  const Dims d{2, 8, 2, 3, 37, 32};
  const int64_t max_s = 64;
  const Tensor q_proj = Randn({d.b, d.s_q, d.n_h, d.hd}, DType::kF32, gen);
  const Tensor q = ValueOrDie(q_proj.Transpose(1, 2));
  const Tensor k_cache = Randn({d.b, d.n_kv, max_s, d.hd}, DType::kBF16, gen);
  const Tensor v_cache = Randn({d.b, d.n_kv, max_s, d.hd}, DType::kBF16, gen);
  const Tensor k = ValueOrDie(k_cache.Narrow(2, 0, d.s_kv));
  const Tensor v = ValueOrDie(v_cache.Narrow(2, 0, d.s_kv));
  Tensor out_buf = ValueOrDie(Tensor::Empty({d.b, d.s_q, d.n_h, d.hd}, DType::kF32));
  Tensor out = ValueOrDie(out_buf.Transpose(1, 2));
  ops::AttentionOptions opt;
  opt.causal = true;
  Check(d, q, k, v, out, opt, "module layouts");
}

TEST(AttentionSplitTest, SplitKeyDecodeMatchesReference) {
  // With more threads than (batch, kv head) units, decode splits the keys and merges partial
  // softmaxes; force both the split and the unsplit paths.
  Generator gen(63);
  const int saved = omp_get_max_threads();
  for (int threads : {1, 3, 16}) {
    omp_set_num_threads(threads);
    for (const Dims& d :
         {Dims{1, 4, 1, 1, 2000, 32}, Dims{2, 2, 2, 1, 777, 64}, Dims{1, 4, 2, 2, 1500, 16}}) {
      const Tensor q = Randn({d.b, d.n_h, d.s_q, d.hd}, DType::kF32, gen);
      const Tensor k = Randn({d.b, d.n_kv, d.s_kv, d.hd}, DType::kF16, gen);
      const Tensor v = Randn({d.b, d.n_kv, d.s_kv, d.hd}, DType::kF32, gen);
      const Tensor mask = RandomMask(d.b, d.s_q, d.s_kv, gen, /*one_empty_row=*/true);
      for (bool causal : {false, true}) {
        for (bool use_mask : {false, true}) {
          ops::AttentionOptions opt;
          opt.causal = causal;
          opt.mask = use_mask ? &mask : nullptr;
          Tensor out = ValueOrDie(Tensor::Empty(q.shape(), DType::kF32));
          Check(d, q, k, v, out, opt,
                absl::StrCat(DimsName(d), " threads ", threads, causal ? " causal" : "",
                             use_mask ? " mask" : ""));
        }
      }
    }
  }
  omp_set_num_threads(saved);
}

// Prefill lengths: 512+ positions (many query tiles, causal skipping of whole key blocks past
// each tile) at GQA ratios 1, 2, 4 and 8 (a tile covers every query head of its KV head), and
// a chunked prefill continuing a 700-key cache.
TEST(AttentionPrefillTest, LongSequencesAtEveryGqaRatio) {
  Generator gen(65);
  for (int64_t g : {1, 2, 4, 8}) {
    for (const Dims& d : {Dims{1, 2 * g, 2, 512, 512, 64}, Dims{1, g, 1, 200, 700, 32}}) {
      const Tensor q = Randn({d.b, d.n_h, d.s_q, d.hd}, DType::kF32, gen);
      const Tensor k = Randn({d.b, d.n_kv, d.s_kv, d.hd}, DType::kBF16, gen);
      const Tensor v = Randn({d.b, d.n_kv, d.s_kv, d.hd}, DType::kBF16, gen);
      ops::AttentionOptions opt;
      opt.causal = true;
      Tensor out = ValueOrDie(Tensor::Empty(q.shape(), DType::kF32));
      Check(d, q, k, v, out, opt, absl::StrCat(DimsName(d), " gqa ", g, " causal"));
    }
  }
  // Non-causal once (no key block skipped), GQA 4.
  const Dims d{1, 8, 2, 520, 520, 16};
  const Tensor q = Randn({d.b, d.n_h, d.s_q, d.hd}, DType::kF32, gen);
  const Tensor k = Randn({d.b, d.n_kv, d.s_kv, d.hd}, DType::kF32, gen);
  const Tensor v = Randn({d.b, d.n_kv, d.s_kv, d.hd}, DType::kF32, gen);
  Tensor out = ValueOrDie(Tensor::Empty(q.shape(), DType::kF32));
  Check(d, q, k, v, out, ops::AttentionOptions{}, absl::StrCat(DimsName(d), " plain"));
}

// The bf16 dot-product route (cpu::AttentionRoundsToBf16): taken only where documented, within
// its bound there (Check), and really rounding (the output differs from the f32 route's);
// ScopedExactGemm and AttentionWithLse (training) keep the f32 route.
TEST(AttentionBf16RouteTest, RoundsOnlyWhereDocumented) {
  Generator gen(66);
  const Dims d{1, 8, 2, 200, 200, 64};
  const Tensor q = Randn({d.b, d.n_h, d.s_q, d.hd}, DType::kF32, gen);
  const Tensor k = Randn({d.b, d.n_kv, d.s_kv, d.hd}, DType::kBF16, gen);
  const Tensor v = Randn({d.b, d.n_kv, d.s_kv, d.hd}, DType::kBF16, gen);
  const Tensor k32 = ValueOrDie(k.To(DType::kF32));
  ops::AttentionOptions opt;
  opt.causal = true;
  const bool route = cpu::AttentionRoundsToBf16(q, k, v);
  EXPECT_EQ(route, cpu::gemm_internal::Bf16DotRouteEnabled());
  EXPECT_FALSE(cpu::AttentionRoundsToBf16(q, k32, v));  // f32 K
  EXPECT_FALSE(cpu::AttentionRoundsToBf16(ValueOrDie(q.Narrow(2, 0, 1)), k, v));  // decode
  Tensor out = ValueOrDie(Tensor::Empty(q.shape(), DType::kF32));
  Check(d, q, k, v, out, opt, "bf16 K/V prefill");
  Tensor exact = ValueOrDie(Tensor::Empty(q.shape(), DType::kF32));
  {
    cpu::ScopedExactGemm keep_f32;
    EXPECT_FALSE(cpu::AttentionRoundsToBf16(q, k, v));
    Check(d, q, k, v, exact, opt, "bf16 K/V prefill, ScopedExactGemm");
  }
  Tensor with_lse = ValueOrDie(Tensor::Empty(q.shape(), DType::kF32));
  Tensor lse = ValueOrDie(Tensor::Empty({d.b, d.n_h, d.s_q}, DType::kF32));
  ASSERT_TRUE(ops::AttentionWithLse(with_lse, lse, q, k, v, opt).ok());
  EXPECT_EQ(Values(with_lse), Values(exact));  // the same f32 route, bit for bit
  const auto got = Values(out), want = Values(exact);
  double max_diff = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(got[i] - want[i]));
  }
  if (route) {
    EXPECT_GT(max_diff, 1e-4) << "the bf16 route rounds Q and P";
  } else {
    EXPECT_EQ(max_diff, 0.0);
  }
}

TEST(AttentionTest, FullyMaskedRowsAreZero) {
  Generator gen(64);
  const Dims d{1, 2, 1, 3, 5, 8};
  const Tensor q = Randn({1, 2, 3, 8}, DType::kF32, gen);
  const Tensor k = Randn({1, 1, 5, 8}, DType::kF32, gen);
  const Tensor v = Randn({1, 1, 5, 8}, DType::kF32, gen);
  const Tensor mask = ValueOrDie(Tensor::Full({1, 3, 5}, 0.0, DType::kBool));
  ops::AttentionOptions opt;
  opt.mask = &mask;
  Tensor out = ValueOrDie(Tensor::Full({1, 2, 3, 8}, 9.0, DType::kF32));
  ASSERT_TRUE(ops::Attention(out, q, k, v, opt).ok());
  for (double x : Values(out)) EXPECT_EQ(x, 0.0);
  (void)d;
}

TEST(AttentionTest, NoKeysGivesZeros) {
  Generator gen(66);
  const Tensor q = Randn({1, 2, 3, 8}, DType::kF32, gen);
  const Tensor k = ValueOrDie(Tensor::Empty({1, 1, 0, 8}, DType::kF32));
  Tensor out = ValueOrDie(Tensor::Full({1, 2, 3, 8}, 9.0, DType::kF32));
  const int saved = omp_get_max_threads();
  for (int threads : {1, 16}) {
    omp_set_num_threads(threads);
    ASSERT_TRUE(ops::Attention(out, q, k, k).ok());
    for (double x : Values(out)) EXPECT_EQ(x, 0.0);
  }
  omp_set_num_threads(saved);
}

TEST(AttentionErrorsTest, MessagesNameTheOffendingValues) {
  Generator gen(65);
  const Tensor q = Randn({1, 6, 2, 8}, DType::kF32, gen);
  const Tensor k = Randn({1, 4, 3, 8}, DType::kF32, gen);
  Tensor out = ValueOrDie(Tensor::Empty({1, 6, 2, 8}, DType::kF32));
  absl::Status st = ops::Attention(out, q, k, k);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("Attention: n_h (6) must be a multiple of n_kv (4)"),
            std::string::npos)
      << st;
  const Tensor k3 = Randn({1, 3, 3, 8}, DType::kF32, gen);
  const Tensor v_bad = Randn({1, 3, 4, 8}, DType::kF32, gen);
  st = ops::Attention(out, q, k3, v_bad);
  EXPECT_NE(st.message().find("Attention: v has shape [1, 3, 4, 8]; expected [1, 3, 3, 8]"),
            std::string::npos)
      << st;
  const Tensor k_hd = Randn({1, 3, 3, 4}, DType::kF32, gen);
  st = ops::Attention(out, q, k_hd, k_hd);
  EXPECT_NE(st.message().find("does not match q [1, 6, 2, 8] in b or h_d"), std::string::npos)
      << st;
  const Tensor fmask = Randn({1, 2, 3}, DType::kF32, gen);
  ops::AttentionOptions opt;
  opt.mask = &fmask;
  st = ops::Attention(out, q, k3, k3, opt);
  EXPECT_NE(st.message().find("Attention: mask has dtype f32; expected bool"), std::string::npos)
      << st;
  const Tensor bmask = ValueOrDie(Tensor::Full({1, 3, 3}, 1.0, DType::kBool));
  opt.mask = &bmask;
  st = ops::Attention(out, q, k3, k3, opt);
  EXPECT_NE(st.message().find("Attention: mask has shape [1, 3, 3]; expected [1, 2, 3]"),
            std::string::npos)
      << st;
  const Tensor q3 = Randn({6, 2, 8}, DType::kF32, gen);
  st = ops::Attention(out, q3, k3, k3);
  EXPECT_NE(st.message().find("Attention: q has shape [6, 2, 8] (3-d)"), std::string::npos) << st;
}

}  // namespace
}  // namespace cctune
