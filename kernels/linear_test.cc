// Linear and Matmul against fp64 references: every float dtype for activations, weights and
// outputs, odd sizes, strided/transposed/expanded views, bias; plus the argument checks.
#include <cmath>
#include <tuple>
#include <vector>

#include "core/random.h"
#include "gtest/gtest.h"
#include "kernels/cpu/gemm/gemm.h"
#include "kernels/cpu/isa_test_util.h"
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

// fp64 Linear: want[r, j] = sum_k x[r, k] w[j, k] + bias[j]; mag[r, j] = sum |x w| + |bias|.
void LinearRef(const std::vector<double>& x, const std::vector<double>& w,
               const std::vector<double>* bias, int64_t m, int64_t n, int64_t k,
               std::vector<double>* want, std::vector<double>* mag) {
  want->assign(m * n, 0.0);
  mag->assign(m * n, 0.0);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      double s = bias ? (*bias)[j] : 0.0, a = bias ? std::fabs((*bias)[j]) : 0.0;
      for (int64_t q = 0; q < k; ++q) {
        s += x[r * k + q] * w[j * k + q];
        a += std::fabs(x[r * k + q] * w[j * k + q]);
      }
      (*want)[r * n + j] = s;
      (*mag)[r * n + j] = a;
    }
  }
}

// The relative part of the GEMM error bound, times sum |x·w|: f32 sums (1e-5 covers k <= 129
// here), or, where GemmNT sends bf16 weights to a path that rounds x to bf16 too (AMX, or the
// packed vdpbf16ps kernel on Zen 4/5), bf16's unit roundoff 2^-8 for x's rounding
// (kernels/cpu/gemm/gemm.h).
double GemmRel(DType wdt, int64_t m) {
  const bool rounds_x = wdt == DType::kBF16 &&
                        cpu::gemm_internal::AutoBf16Route(m) != cpu::gemm_internal::GemmIsa::kAuto;
  return rounds_x ? 1.0 / 256 + 1e-5 : 1e-5;
}

// (ISA level of the GEMM, x and out dtype, w dtype, x/out layout)
class LinearTest : public testing::IsaLevelTupleTest<DType, DType, Layout> {};

TEST_P(LinearTest, MatchesReference) {
  const auto [level, dt, wdt, layout] = GetParam();
  Generator gen(21);
  const std::vector<Shape> lead = {{1}, {3}, {2, 5}, {37}};
  for (const Shape& ld : lead) {
    for (int64_t k : {1, 3, 17, 129}) {
      for (int64_t n : {1, 5, 33}) {
        for (bool with_bias : {false, true}) {
          Shape xs = ld;
          xs.push_back(k);
          Shape os = ld;
          os.push_back(n);
          const Tensor x = WithLayout(Randn(xs, dt, gen), layout);
          const Tensor w = Randn({n, k}, wdt, gen);
          const Tensor bias = Randn({n}, wdt, gen);
          Tensor out = EmptyLike(os, dt, layout);
          ASSERT_TRUE(ops::Linear(out, x, w, with_bias ? &bias : nullptr).ok());
          const int64_t m = x.numel() / k;
          std::vector<double> want, mag;
          const auto vb = Values(bias);
          LinearRef(Values(x), Values(w), with_bias ? &vb : nullptr, m, n, k, &want, &mag);
          for (double& a : mag) a = GemmRel(wdt, m) * a + SubnormalStep(dt);
          ExpectClose(Values(out), want, mag, 2 * Roundoff(dt),
                      absl::StrCat("Linear x ", ShapeToString(xs), " w [", n, ", ", k, "]",
                                   with_bias ? " +bias" : ""));
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, LinearTest,
                         ::testing::Combine(::testing::ValuesIn(cpu::kAllIsaLevels),
                                            ::testing::ValuesIn(testing::kFloatTypes),
                                            ::testing::ValuesIn(testing::kFloatTypes),
                                            ::testing::ValuesIn(testing::kAllLayouts)),
                         [](const ::testing::TestParamInfo<LinearTest::ParamType>& info) {
                           return absl::StrCat(cpu::IsaLevelName(std::get<0>(info.param)), "_x_",
                                               DTypeName(std::get<1>(info.param)), "_w_",
                                               DTypeName(std::get<2>(info.param)), "_",
                                               testing::LayoutName(std::get<3>(info.param)));
                         });

class LinearViewsTest : public testing::IsaLevelTest {};

TEST_P(LinearViewsTest, StridedWeightsAndLargeM) {
  Generator gen(22);
  // Weights given as views: a transposed f32 [k, n] (read in place), a transposed bf16 and a
  // column-sliced f16 (copied); m large enough for the blocked GEMM path.
  for (DType wdt : testing::kFloatTypes) {
    for (int64_t m : {2, 70}) {
      const int64_t k = 45, n = 19;
      const Tensor x = Randn({m, k}, DType::kF32, gen);
      const Tensor wt = Randn({k, n}, wdt, gen);
      const Tensor w_transposed = ValueOrDie(wt.Transpose(0, 1));
      const Tensor w_wide = Randn({n, 2 * k}, wdt, gen);
      const Tensor w_stepped = ValueOrDie(w_wide.Slice(1, 0, 2 * k, 2));
      for (const Tensor* w : {&w_transposed, &w_stepped}) {
        Tensor out = ValueOrDie(Tensor::Empty({m, n}, DType::kF32));
        ASSERT_TRUE(ops::Linear(out, x, *w).ok());
        std::vector<double> want, mag;
        const Tensor wc = ValueOrDie(w->Contiguous());
        LinearRef(Values(x), Values(wc), nullptr, m, n, k, &want, &mag);
        for (double& a : mag) a *= GemmRel(wdt, m);
        ExpectClose(Values(out), want, mag, 0.0,
                    absl::StrCat("Linear strided w ", DTypeName(wdt), " m=", m));
      }
    }
  }
}

TEST_P(LinearViewsTest, ZeroInnerDimGivesBias) {
  Generator gen(23);
  const Tensor x = ValueOrDie(Tensor::Empty({3, 0}, DType::kF32));
  const Tensor w = ValueOrDie(Tensor::Empty({4, 0}, DType::kF32));
  const Tensor bias = Randn({4}, DType::kF32, gen);
  Tensor out = ValueOrDie(Tensor::Full({3, 4}, 7.0, DType::kF32));
  ASSERT_TRUE(ops::Linear(out, x, w, &bias).ok());
  const auto vb = Values(bias), vo = Values(out);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(vo[i], vb[i % 4]);
}

CCTUNE_INSTANTIATE_ISA_LEVELS(LinearViewsTest);

// fp64 batched matmul over row-major values of a [nb, m, k] and b [nb, k, n].
std::vector<double> MatmulRef(const std::vector<double>& a, const std::vector<double>& b,
                              int64_t nb, int64_t m, int64_t k, int64_t n,
                              std::vector<double>* mag) {
  std::vector<double> c(nb * m * n, 0.0);
  mag->assign(c.size(), 0.0);
  for (int64_t t = 0; t < nb; ++t) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double s = 0, g = 0;
        for (int64_t q = 0; q < k; ++q) {
          const double p = a[(t * m + i) * k + q] * b[(t * k + q) * n + j];
          s += p;
          g += std::fabs(p);
        }
        c[(t * m + i) * n + j] = s;
        (*mag)[(t * m + i) * n + j] = g;
      }
    }
  }
  return c;
}

class MatmulTest : public testing::IsaLevelTupleTest<DType, Layout> {};

TEST_P(MatmulTest, MatchesReference) {
  const auto [level, dt, layout] = GetParam();
  Generator gen(24);
  const std::vector<Shape> batch = {{}, {3}, {2, 2}};
  for (const Shape& bs : batch) {
    for (int64_t m : {1, 5, 33}) {
      for (int64_t k : {1, 3, 17, 129}) {
        for (int64_t n : {1, 7}) {
          Shape as = bs, bsh = bs, os = bs;
          as.insert(as.end(), {m, k});
          bsh.insert(bsh.end(), {k, n});
          os.insert(os.end(), {m, n});
          const Tensor a = WithLayout(Randn(as, dt, gen), layout);
          const Tensor b = WithLayout(Randn(bsh, dt, gen), layout);
          Tensor out = EmptyLike(os, dt, layout);
          ASSERT_TRUE(ops::Matmul(out, a, b).ok());
          std::vector<double> mag;
          const int64_t nb = NumElements(bs);
          const auto want = MatmulRef(Values(a), Values(b), nb, m, k, n, &mag);
          for (double& g : mag) g = 1e-5 * g + SubnormalStep(dt);
          ExpectClose(Values(out), want, mag, 2 * Roundoff(dt),
                      absl::StrCat("Matmul ", ShapeToString(as), " @ ", ShapeToString(bsh)));
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, MatmulTest,
                         ::testing::Combine(::testing::ValuesIn(cpu::kAllIsaLevels),
                                            ::testing::ValuesIn(testing::kFloatTypes),
                                            ::testing::ValuesIn(testing::kAllLayouts)),
                         [](const ::testing::TestParamInfo<MatmulTest::ParamType>& info) {
                           return absl::StrCat(cpu::IsaLevelName(std::get<0>(info.param)), "_",
                                               DTypeName(std::get<1>(info.param)), "_",
                                               testing::LayoutName(std::get<2>(info.param)));
                         });

class MatmulViewsTest : public testing::IsaLevelTest {};

TEST_P(MatmulViewsTest, TransposedAndExpandedOperands) {
  Generator gen(25);
  // Attention-style: scores = q @ kᵀ with k transposed in place, and b broadcast over a batch
  // dim with Expand (stride 0).
  const int64_t nb = 3, m = 6, k = 16, n = 9;
  const Tensor q = Randn({nb, m, k}, DType::kF32, gen);
  const Tensor kk = Randn({nb, n, k}, DType::kF32, gen);
  const Tensor kt = ValueOrDie(kk.Transpose(-1, -2));  // [nb, k, n]
  const Tensor at = ValueOrDie(Randn({nb, k, m}, DType::kF32, gen).Transpose(-1, -2));
  const Tensor shared = Randn({1, k, n}, DType::kF32, gen);
  const Tensor expanded = ValueOrDie(shared.Expand({nb, k, n}));
  struct Case {
    const Tensor* a;
    const Tensor* b;
    const char* name;
  } cases[] = {{&q, &kt, "q @ k^T"}, {&at, &kt, "a^T @ k^T"}, {&q, &expanded, "expanded b"}};
  for (const Case& c : cases) {
    Tensor out = ValueOrDie(Tensor::Empty({nb, m, n}, DType::kF32));
    ASSERT_TRUE(ops::Matmul(out, *c.a, *c.b).ok()) << c.name;
    std::vector<double> mag;
    const auto want = MatmulRef(Values(*c.a), Values(*c.b), nb, m, k, n, &mag);
    for (double& g : mag) g *= 1e-5;
    ExpectClose(Values(out), want, mag, 0.0, c.name);
  }
  // A transposed output view.
  Tensor out_t = ValueOrDie(Tensor::Empty({nb, n, m}, DType::kF32));
  Tensor out = ValueOrDie(out_t.Transpose(-1, -2));
  ASSERT_TRUE(ops::Matmul(out, q, kt).ok());
  std::vector<double> mag;
  const auto want = MatmulRef(Values(q), Values(kt), nb, m, k, n, &mag);
  for (double& g : mag) g *= 1e-5;
  ExpectClose(Values(out), want, mag, 0.0, "transposed out");
}

CCTUNE_INSTANTIATE_ISA_LEVELS(MatmulViewsTest);

TEST(LinearErrorsTest, MessagesNameTheOffendingValues) {
  Generator gen(26);
  const Tensor x = Randn({2, 5, 7}, DType::kF32, gen);
  const Tensor w = Randn({3, 8}, DType::kF32, gen);
  Tensor out = ValueOrDie(Tensor::Empty({2, 5, 3}, DType::kF32));
  absl::Status st = ops::Linear(out, x, w);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("Linear: x [2, 5, 7] last dim 7 != w [3, 8] dim 1"),
            std::string::npos)
      << st;
  const Tensor w7 = Randn({3, 7}, DType::kF32, gen);
  const Tensor bias = Randn({4}, DType::kF32, gen);
  st = ops::Linear(out, x, w7, &bias);
  EXPECT_NE(st.message().find("Linear: bias has shape [4]; expected [3]"), std::string::npos) << st;
  Tensor out_bad = ValueOrDie(Tensor::Empty({2, 5, 4}, DType::kF32));
  st = ops::Linear(out_bad, x, w7);
  EXPECT_NE(st.message().find("Linear: out has shape [2, 5, 4]; expected [2, 5, 3]"),
            std::string::npos)
      << st;
  const Tensor w3d = Randn({1, 3, 7}, DType::kF32, gen);
  st = ops::Linear(out, x, w3d);
  EXPECT_NE(st.message().find("Linear: w has shape [1, 3, 7] (3-d); expected 2-d [n, k]"),
            std::string::npos)
      << st;

  const Tensor a = Randn({2, 4, 5}, DType::kF32, gen);
  const Tensor b = Randn({3, 5, 6}, DType::kF32, gen);
  Tensor c = ValueOrDie(Tensor::Empty({2, 4, 6}, DType::kF32));
  st = ops::Matmul(c, a, b);
  EXPECT_NE(st.message().find("Matmul: batch dim 0 differs: a [2, 4, 5] vs b [3, 5, 6]"),
            std::string::npos)
      << st;
  const Tensor b2 = Randn({2, 6, 6}, DType::kF32, gen);
  st = ops::Matmul(c, a, b2);
  EXPECT_NE(st.message().find("Matmul: a [2, 4, 5] last dim 5 != b [2, 6, 6] dim 1"),
            std::string::npos)
      << st;
}

}  // namespace
}  // namespace cctune
