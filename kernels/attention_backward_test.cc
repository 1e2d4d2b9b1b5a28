// AttentionBackward against fp64 central finite differences of an fp64 attention: MHA, GQA and
// MQA; causal, explicit masks with an empty row, both, a custom scale; s_q < s_kv and
// s_q > s_kv; several key blocks; with and without the saved out and lse; f32 and bf16 inputs;
// strided views of every tensor; accumulation. Also AttentionWithLse's lse against fp64, and
// results independent of the thread count.
#include <omp.h>

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
using testing::ExpectGradClose;
using testing::Layout;
using testing::Minus;
using testing::NumericGradient;
using testing::Randn;
using testing::Values;
using testing::WithLayout;

struct Dims {
  int64_t b, n_h, n_kv, s_q, s_kv, hd;
};

std::string DimsName(const Dims& d) {
  return absl::StrCat("b", d.b, " n_h", d.n_h, " n_kv", d.n_kv, " s_q", d.s_q, " s_kv", d.s_kv,
                      " h_d", d.hd);
}

// fp64 attention over row-major values: writes out (if not null) and lse (if not null), and
// returns sum(dy · out).
double AttentionLoss(const Dims& d, const std::vector<double>& q, const std::vector<double>& k,
                     const std::vector<double>& v, const std::vector<double>* mask, bool causal,
                     double scale, const std::vector<double>& dy, std::vector<double>* lse) {
  const int64_t g = d.n_h / d.n_kv;
  std::vector<double> s(d.s_kv);
  double loss = 0;
  if (lse != nullptr) lse->assign(d.b * d.n_h * d.s_q, -INFINITY);
  for (int64_t bi = 0; bi < d.b; ++bi) {
    for (int64_t h = 0; h < d.n_h; ++h) {
      const int64_t kvh = h / g;
      for (int64_t i = 0; i < d.s_q; ++i) {
        const int64_t row = (bi * d.n_h + h) * d.s_q + i;
        const double* qr = &q[row * d.hd];
        double mx = -INFINITY;
        for (int64_t j = 0; j < d.s_kv; ++j) {
          const bool allowed = (!causal || j <= d.s_kv - d.s_q + i) &&
                               (mask == nullptr || (*mask)[(bi * d.s_q + i) * d.s_kv + j] != 0);
          s[j] = -INFINITY;
          if (!allowed) continue;
          const double* kr = &k[((bi * d.n_kv + kvh) * d.s_kv + j) * d.hd];
          double dot = 0;
          for (int64_t e = 0; e < d.hd; ++e) dot += qr[e] * kr[e];
          s[j] = dot * scale;
          mx = std::max(mx, s[j]);
        }
        if (mx == -INFINITY) continue;
        double sum = 0;
        for (int64_t j = 0; j < d.s_kv; ++j) sum += std::exp(s[j] - mx);
        if (lse != nullptr) (*lse)[row] = mx + std::log(sum);
        for (int64_t j = 0; j < d.s_kv; ++j) {
          if (s[j] == -INFINITY) continue;
          const double p = std::exp(s[j] - mx) / sum;
          const double* vr = &v[((bi * d.n_kv + kvh) * d.s_kv + j) * d.hd];
          for (int64_t e = 0; e < d.hd; ++e) loss += dy[row * d.hd + e] * p * vr[e];
        }
      }
    }
  }
  return loss;
}

Tensor RandomMask(int64_t b, int64_t s_q, int64_t s_kv, Generator& gen) {
  std::vector<float> m(b * s_q * s_kv);
  for (float& x : m) x = gen.Uniform() < 0.6f ? 1.f : 0.f;
  for (int64_t j = 0; j < s_kv; ++j) m[(s_q - 1) * s_kv + j] = 0.f;  // batch 0, last row: empty
  return ValueOrDie(Tensor::FromVector(m, {b, s_q, s_kv}, DType::kBool));
}

// (q/k/v dtype, layout of every tensor)
class AttentionBackwardTest : public ::testing::TestWithParam<std::tuple<DType, Layout>> {};

TEST_P(AttentionBackwardTest, MatchesFiniteDifferences) {
  const auto [dt, layout] = GetParam();
  Generator gen(601);
  const std::vector<Dims> dims = {
      {1, 2, 2, 3, 3, 4},   // MHA
      {2, 4, 2, 5, 7, 8},   // GQA, s_q < s_kv (chunked prefill)
      {1, 3, 1, 4, 4, 6},   // MQA
      {1, 2, 1, 6, 3, 4},   // s_q > s_kv: causal leaves the first rows empty
      {1, 4, 2, 3, 70, 8},  // several key blocks
      {1, 2, 1, 5, 40, 8},  // key blocks of 3 vectors (the dq pass)
      {1, 2, 2, 4, 20, 16}, // key blocks of 2 vectors
  };
  for (const Dims& d : dims) {
    const Tensor q = WithLayout(Randn({d.b, d.n_h, d.s_q, d.hd}, dt, gen), layout);
    const Tensor k = WithLayout(Randn({d.b, d.n_kv, d.s_kv, d.hd}, dt, gen), layout);
    const Tensor v = WithLayout(Randn({d.b, d.n_kv, d.s_kv, d.hd}, dt, gen), layout);
    const Tensor dy = WithLayout(Randn(q.shape(), DType::kF32, gen), layout);
    const Tensor mask = RandomMask(d.b, d.s_q, d.s_kv, gen);
    const auto vq = Values(q), vk = Values(k), vv = Values(v), vdy = Values(dy);
    const auto vmask = Values(mask);
    for (int variant = 0; variant < 5; ++variant) {
      ops::AttentionOptions opt;
      std::string name = DimsName(d) + " " + DTypeName(dt);
      if (variant == 1 || variant == 3 || variant == 4) opt.causal = true;
      if (variant == 2 || variant == 3) opt.mask = &mask;
      if (variant == 4) opt.scale = 0.37f;
      name += variant == 0   ? " plain"
              : variant == 1 ? " causal"
              : variant == 2 ? " mask"
              : variant == 3 ? " causal+mask"
                             : " scale 0.37";
      const double scale = opt.scale != 0.f ? opt.scale : 1.0 / std::sqrt(double(d.hd));
      const std::vector<double>* mp = opt.mask != nullptr ? &vmask : nullptr;
      auto loss = [&](const std::vector<double>& pq, const std::vector<double>& pk,
                      const std::vector<double>& pv) {
        return AttentionLoss(d, pq, pk, pv, mp, opt.causal, scale, vdy, nullptr);
      };
      const auto gq =
          NumericGradient([&](const std::vector<double>& p) { return loss(p, vk, vv); }, vq);
      const auto gk =
          NumericGradient([&](const std::vector<double>& p) { return loss(vq, p, vv); }, vk);
      const auto gv =
          NumericGradient([&](const std::vector<double>& p) { return loss(vq, vk, p); }, vv);
      // The saved forward tensors: out in f32 (so that D = dy·out is exact to f32), and lse.
      Tensor out = EmptyLike(q.shape(), DType::kF32, layout);
      Tensor lse = EmptyLike({d.b, d.n_h, d.s_q}, DType::kF32, layout);
      ASSERT_TRUE(ops::AttentionWithLse(out, lse, q, k, v, opt).ok()) << name;
      for (int saved = 0; saved < 4; ++saved) {
        const Tensor* out_p = (saved & 1) ? &out : nullptr;
        const Tensor* lse_p = (saved & 2) ? &lse : nullptr;
        const std::string what = absl::StrCat(name, out_p ? " +out" : "", lse_p ? " +lse" : "");
        Tensor dq = WithLayout(Randn(q.shape(), DType::kF32, gen), layout);
        Tensor dk = WithLayout(Randn(k.shape(), DType::kF32, gen), layout);
        Tensor dv = WithLayout(Randn(v.shape(), DType::kF32, gen), layout);
        const auto dq0 = Values(dq), dk0 = Values(dk), dv0 = Values(dv);
        ASSERT_TRUE(ops::AttentionBackward(dq, dk, dv, dy, q, k, v, out_p, lse_p, opt).ok())
            << what;
        ExpectGradClose(Minus(Values(dq), dq0), gq, 2e-5, "dq " + what);
        ExpectGradClose(Minus(Values(dk), dk0), gk, 2e-5, "dk " + what);
        ExpectGradClose(Minus(Values(dv), dv0), gv, 2e-5, "dv " + what);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    DTypes, AttentionBackwardTest,
    ::testing::Combine(::testing::Values(DType::kF32, DType::kBF16),
                       ::testing::ValuesIn(testing::kAllLayouts)),
    [](const ::testing::TestParamInfo<AttentionBackwardTest::ParamType>& info) {
      return absl::StrCat(DTypeName(std::get<0>(info.param)), "_",
                          testing::LayoutName(std::get<1>(info.param)));
    });

TEST(AttentionWithLseTest, LseMatchesReferenceAndOutMatchesAttention) {
  Generator gen(602);
  const int saved_threads = omp_get_max_threads();
  // Threads 16 with one unit of work forces the split-key decode path.
  for (int threads : {1, 16}) {
    omp_set_num_threads(threads);
    for (const Dims& d : {Dims{2, 4, 2, 5, 9, 8}, Dims{1, 4, 1, 1, 1500, 16}}) {
      const Tensor q = Randn({d.b, d.n_h, d.s_q, d.hd}, DType::kF32, gen);
      const Tensor k = Randn({d.b, d.n_kv, d.s_kv, d.hd}, DType::kBF16, gen);
      const Tensor v = Randn({d.b, d.n_kv, d.s_kv, d.hd}, DType::kF32, gen);
      const Tensor mask = RandomMask(d.b, d.s_q, d.s_kv, gen);
      ops::AttentionOptions opt;
      opt.causal = true;
      opt.mask = &mask;
      Tensor out = ValueOrDie(Tensor::Empty(q.shape(), DType::kF32));
      Tensor out_plain = ValueOrDie(Tensor::Empty(q.shape(), DType::kF32));
      Tensor lse = ValueOrDie(Tensor::Empty({d.b, d.n_h, d.s_q}, DType::kF32));
      ASSERT_TRUE(ops::AttentionWithLse(out, lse, q, k, v, opt).ok());
      ASSERT_TRUE(ops::Attention(out_plain, q, k, v, opt).ok());
      EXPECT_EQ(Values(out), Values(out_plain)) << DimsName(d);
      std::vector<double> want;
      const auto vmask = Values(mask);
      AttentionLoss(d, Values(q), Values(k), Values(v), &vmask, true, 1.0 / std::sqrt(double(d.hd)),
                    std::vector<double>(q.numel(), 0.0), &want);
      ExpectClose(Values(lse), want, {2e-5}, 2e-6, "lse " + DimsName(d));
      EXPECT_EQ(Values(lse)[d.s_q - 1], -INFINITY) << "the empty row's lse is -inf";
    }
  }
  omp_set_num_threads(saved_threads);
}

// Exact fp64 gradients of sum(dy · attention(q, k, v)) (row-major values): P from the scores,
// dP = dy·v, D = sum_j P·dP, dS = P·(dP - D); dq = scale·dS·k, dk = scale·dSᵀ·q, dv = Pᵀ·dy.
void AttentionGradsF64(const Dims& d, const std::vector<double>& q, const std::vector<double>& k,
                       const std::vector<double>& v, const std::vector<double>* mask, bool causal,
                       double scale, const std::vector<double>& dy, std::vector<double>* gq,
                       std::vector<double>* gk, std::vector<double>* gv) {
  const int64_t g = d.n_h / d.n_kv;
  gq->assign(q.size(), 0.0);
  gk->assign(k.size(), 0.0);
  gv->assign(v.size(), 0.0);
  std::vector<double> p(d.s_kv), dp(d.s_kv);
  for (int64_t bi = 0; bi < d.b; ++bi) {
    for (int64_t h = 0; h < d.n_h; ++h) {
      const int64_t kvh = h / g;
      for (int64_t i = 0; i < d.s_q; ++i) {
        const int64_t row = (bi * d.n_h + h) * d.s_q + i;
        const double* qr = &q[row * d.hd];
        const double* gr = &dy[row * d.hd];
        double mx = -INFINITY;
        for (int64_t j = 0; j < d.s_kv; ++j) {
          const bool allowed = (!causal || j <= d.s_kv - d.s_q + i) &&
                               (mask == nullptr || (*mask)[(bi * d.s_q + i) * d.s_kv + j] != 0);
          p[j] = -INFINITY;
          if (!allowed) continue;
          const double* kr = &k[((bi * d.n_kv + kvh) * d.s_kv + j) * d.hd];
          double dot = 0;
          for (int64_t e = 0; e < d.hd; ++e) dot += qr[e] * kr[e];
          p[j] = dot * scale;
          mx = std::max(mx, p[j]);
        }
        if (mx == -INFINITY) continue;
        double sum = 0;
        for (int64_t j = 0; j < d.s_kv; ++j) sum += std::exp(p[j] - mx);
        double dsum = 0;
        for (int64_t j = 0; j < d.s_kv; ++j) {
          p[j] = std::exp(p[j] - mx) / sum;
          const double* vr = &v[((bi * d.n_kv + kvh) * d.s_kv + j) * d.hd];
          double dot = 0;
          for (int64_t e = 0; e < d.hd; ++e) dot += gr[e] * vr[e];
          dp[j] = dot;
          dsum += p[j] * dot;
        }
        for (int64_t j = 0; j < d.s_kv; ++j) {
          if (p[j] == 0) continue;
          const double ds = p[j] * (dp[j] - dsum) * scale;
          const int64_t kv_off = ((bi * d.n_kv + kvh) * d.s_kv + j) * d.hd;
          for (int64_t e = 0; e < d.hd; ++e) {
            (*gq)[row * d.hd + e] += ds * k[kv_off + e];
            (*gk)[kv_off + e] += ds * qr[e];
            (*gv)[kv_off + e] += p[j] * gr[e];
          }
        }
      }
    }
  }
}

// Longer sequences than the finite-difference test affords, against exact fp64 gradients:
// several query tiles and key blocks, causal with s_q < s_kv (tiles that start mid-block), a
// head_dim that is not a whole number of vectors, and one problem large enough that the dq
// pass recomputes dS instead of reading what the dk/dv pass stored.
TEST(AttentionBackwardTest, LongSequencesMatchExactGradients) {
  Generator gen(604);
  const std::vector<Dims> dims = {
      {2, 4, 2, 100, 100, 16},
      {1, 6, 2, 70, 133, 20},
      {1, 4, 2, 2050, 2050, 16},  // b·n_h·s_q·s_kv > 2^24: dS recomputed
  };
  for (const Dims& d : dims) {
    const Tensor q = Randn({d.b, d.n_h, d.s_q, d.hd}, DType::kF32, gen);
    const Tensor k = Randn({d.b, d.n_kv, d.s_kv, d.hd}, DType::kF32, gen);
    const Tensor v = Randn({d.b, d.n_kv, d.s_kv, d.hd}, DType::kF32, gen);
    const Tensor dy = Randn(q.shape(), DType::kF32, gen);
    const Tensor mask = RandomMask(d.b, d.s_q, d.s_kv, gen);
    const auto vq = Values(q), vk = Values(k), vv = Values(v), vdy = Values(dy);
    const auto vmask = Values(mask);
    const bool big = d.s_q > 1000;
    for (int variant = big ? 1 : 0; variant < (big ? 2 : 3); ++variant) {
      ops::AttentionOptions opt;
      opt.causal = variant != 0;
      if (variant == 2) opt.mask = &mask;
      const std::string name = DimsName(d) + (variant == 0   ? " plain"
                                              : variant == 1 ? " causal"
                                                             : " causal+mask");
      std::vector<double> gq, gk, gv;
      AttentionGradsF64(d, vq, vk, vv, opt.mask != nullptr ? &vmask : nullptr, opt.causal,
                        1.0 / std::sqrt(double(d.hd)), vdy, &gq, &gk, &gv);
      Tensor out = ValueOrDie(Tensor::Empty(q.shape(), DType::kF32));
      Tensor lse = ValueOrDie(Tensor::Empty({d.b, d.n_h, d.s_q}, DType::kF32));
      ASSERT_TRUE(ops::AttentionWithLse(out, lse, q, k, v, opt).ok()) << name;
      Tensor dq = ValueOrDie(Tensor::Zeros(q.shape(), DType::kF32));
      Tensor dk = ValueOrDie(Tensor::Zeros(k.shape(), DType::kF32));
      Tensor dv = ValueOrDie(Tensor::Zeros(v.shape(), DType::kF32));
      ASSERT_TRUE(ops::AttentionBackward(dq, dk, dv, dy, q, k, v, &out, &lse, opt).ok()) << name;
      ExpectGradClose(Values(dq), gq, 2e-5, "dq " + name);
      ExpectGradClose(Values(dk), gk, 2e-5, "dk " + name);
      ExpectGradClose(Values(dv), gv, 2e-5, "dv " + name);
    }
  }
}

TEST(AttentionBackwardDeterminismTest, SameBitsForAnyThreadCount) {
  Generator gen(603);
  const Dims d{2, 8, 2, 40, 100, 16};
  const Tensor q = Randn({d.b, d.n_h, d.s_q, d.hd}, DType::kF32, gen);
  const Tensor k = Randn({d.b, d.n_kv, d.s_kv, d.hd}, DType::kF32, gen);
  const Tensor v = Randn({d.b, d.n_kv, d.s_kv, d.hd}, DType::kF32, gen);
  const Tensor dy = Randn(q.shape(), DType::kF32, gen);
  ops::AttentionOptions opt;
  opt.causal = true;
  const int saved = omp_get_max_threads();
  std::vector<double> first[3];
  for (int threads : {1, 3, 16}) {
    omp_set_num_threads(threads);
    Tensor dq = ValueOrDie(Tensor::Zeros(q.shape(), DType::kF32));
    Tensor dk = ValueOrDie(Tensor::Zeros(k.shape(), DType::kF32));
    Tensor dv = ValueOrDie(Tensor::Zeros(v.shape(), DType::kF32));
    ASSERT_TRUE(ops::AttentionBackward(dq, dk, dv, dy, q, k, v, nullptr, nullptr, opt).ok());
    const std::vector<double> got[3] = {Values(dq), Values(dk), Values(dv)};
    for (int i = 0; i < 3; ++i) {
      if (first[i].empty()) {
        first[i] = got[i];
      } else {
        EXPECT_EQ(got[i], first[i]) << "gradient " << i << " with " << threads << " threads";
      }
    }
  }
  omp_set_num_threads(saved);
}

TEST(AttentionBackwardTest, RejectsBadArguments) {
  Generator gen(604);
  const Tensor q = Randn({1, 4, 3, 8}, DType::kF32, gen);
  const Tensor k = Randn({1, 2, 5, 8}, DType::kF32, gen);
  const Tensor v = Randn({1, 2, 5, 8}, DType::kF32, gen);
  const Tensor dy = Randn({1, 4, 3, 8}, DType::kF32, gen);
  Tensor dq = Randn({1, 4, 3, 8}, DType::kF32, gen);
  Tensor dk = Randn({1, 2, 5, 8}, DType::kF32, gen);
  Tensor dv_bad = Randn({1, 4, 5, 8}, DType::kF32, gen);
  absl::Status st = ops::AttentionBackward(dq, dk, dv_bad, dy, q, k, v, nullptr, nullptr);
  EXPECT_NE(st.message().find("AttentionBackward: dv has shape [1, 4, 5, 8]; expected "
                              "[1, 2, 5, 8]"),
            std::string::npos)
      << st;
  Tensor dv = Randn({1, 2, 5, 8}, DType::kF32, gen);
  const Tensor lse_bad = Randn({1, 4, 5}, DType::kF32, gen);
  st = ops::AttentionBackward(dq, dk, dv, dy, q, k, v, nullptr, &lse_bad);
  EXPECT_NE(st.message().find("lse has shape [1, 4, 5]; expected [1, 4, 3]"), std::string::npos)
      << st;
  const Tensor k3 = Randn({1, 3, 5, 8}, DType::kF32, gen);
  Tensor dk3 = Randn({1, 3, 5, 8}, DType::kF32, gen);
  st = ops::AttentionBackward(dq, dk3, dk3, dy, q, k3, k3, nullptr, nullptr);
  EXPECT_NE(st.message().find("n_h (4) must be a multiple of n_kv (3)"), std::string::npos) << st;
  Tensor out = Randn({1, 4, 3, 8}, DType::kF32, gen);
  Tensor lse_bf16 = Randn({1, 4, 3}, DType::kBF16, gen);
  st = ops::AttentionWithLse(out, lse_bf16, q, k, v);
  EXPECT_NE(st.message().find("AttentionWithLse: lse has dtype bf16; expected f32"),
            std::string::npos)
      << st;
}

}  // namespace
}  // namespace cctune
