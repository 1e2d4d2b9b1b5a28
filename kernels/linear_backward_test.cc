// LinearBackward against fp64 central finite differences of an fp64 Linear: f32/bf16/f16
// activations and weights, odd sizes, strided and transposed views of every tensor, optional
// outputs; accumulation (+=) into existing gradients; the large-m (BLAS) path and the
// blocked path for 16-bit weights against an fp64 reference; argument errors.
#include <algorithm>
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
using testing::ExpectGradClose;
using testing::Layout;
using testing::Minus;
using testing::NumericGradient;
using testing::Randn;
using testing::Values;
using testing::WithLayout;

// Gradients of f32 kernels vs an exact reference, relative to the largest gradient.
constexpr double kTol = 2e-5;

// Whether LinearBackward takes the bf16 dot routes for a weight of `wdt` (cpu::GemmNNBf16 for
// dx, cpu::GemmTNBf16 for dw: bf16 weights on a CPU whose bf16 dot runs at twice the f32
// rate, Zen 4/5). They round dy (dx), and dy and x (dw), to bf16.
bool Bf16DotRoutes(DType wdt) {
  return wdt == DType::kBF16 && cpu::gemm_internal::Bf16DotRouteEnabled();
}

// |actual[i] - want[i]| <= tol · (max |want| + |want[i]|) + rel · mag[i]: ExpectGradClose's
// bound plus the operands' rounding, `rel` of sum |products| per element.
void ExpectRoundedGradClose(const std::vector<double>& actual, const std::vector<double>& want,
                            const std::vector<double>& mag, double rel, const std::string& what) {
  double max_want = 0;
  for (double v : want) max_want = std::max(max_want, std::fabs(v));
  std::vector<double> atol(want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    atol[i] = kTol * (max_want + std::fabs(want[i])) + rel * mag[i];
  }
  testing::ExpectClose(actual, want, atol, 0.0, what);
}

// sum_j |dy[r, j] · w[j, q]| (dx's products) and sum_r |dy[r, j] · x[r, q]| (dw's).
struct Magnitudes {
  std::vector<double> dx, dw;
};
Magnitudes ProductMagnitudes(const std::vector<double>& dy, const std::vector<double>& x,
                             const std::vector<double>& w, int64_t m, int64_t n, int64_t k) {
  Magnitudes mag{std::vector<double>(m * k, 0.0), std::vector<double>(n * k, 0.0)};
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      const double g = std::fabs(dy[r * n + j]);
      for (int64_t q = 0; q < k; ++q) {
        mag.dx[r * k + q] += g * std::fabs(w[j * k + q]);
        mag.dw[j * k + q] += g * std::fabs(x[r * k + q]);
      }
    }
  }
  return mag;
}

// bf16's unit roundoff for one rounded operand (dx: dy), and for two (dw: dy and x).
constexpr double kOneRounded = 1.0 / 256, kTwoRounded = 1.0 / 128 + 1.0 / 65536;

// fp64 Linear loss: sum_{r, j} dy[r, j] · (sum_q x[r, q] w[j, q] + bias[j]).
double LinearLoss(const std::vector<double>& x, const std::vector<double>& w,
                  const std::vector<double>* bias, const std::vector<double>& dy, int64_t m,
                  int64_t n, int64_t k) {
  double loss = 0;
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      double y = bias != nullptr ? (*bias)[j] : 0.0;
      for (int64_t q = 0; q < k; ++q) y += x[r * k + q] * w[j * k + q];
      loss += dy[r * n + j] * y;
    }
  }
  return loss;
}

struct Case {
  Shape lead;
  int64_t k, n;
};

Shape WithLast(Shape s, int64_t last) {
  s.push_back(last);
  return s;
}

// (ISA level of the GEMM, x dtype, w dtype, layout of every tensor)
class LinearBackwardTest : public testing::IsaLevelTupleTest<DType, DType, Layout> {};

TEST_P(LinearBackwardTest, MatchesFiniteDifferences) {
  const auto [level, xdt, wdt, layout] = GetParam();
  Generator gen(101);
  const std::vector<Case> cases = {
      {{1}, 1, 1}, {{3}, 7, 5}, {{2, 5}, 33, 17}, {{4}, 16, 1}, {{1}, 5, 9}};
  for (const Case& c : cases) {
    for (bool with_bias : {false, true}) {
      const std::string what =
          absl::StrCat("x ", ShapeToString(WithLast(c.lead, c.k)), " ", DTypeName(xdt), " w [", c.n,
                       ", ", c.k, "] ", DTypeName(wdt), with_bias ? " +bias" : "");
      const int64_t m = NumElements(c.lead);
      const Tensor x = WithLayout(Randn(WithLast(c.lead, c.k), xdt, gen), layout);
      const Tensor w = WithLayout(Randn({c.n, c.k}, wdt, gen), layout);
      const Tensor dy = WithLayout(Randn(WithLast(c.lead, c.n), DType::kF32, gen), layout);
      // Gradients start from random values: the op must add to them.
      Tensor dx = WithLayout(Randn(x.shape(), DType::kF32, gen), layout);
      Tensor dw = WithLayout(Randn(w.shape(), DType::kF32, gen), layout);
      Tensor db = WithLayout(Randn({c.n}, DType::kF32, gen), layout);
      const auto dx0 = Values(dx), dw0 = Values(dw), db0 = Values(db);
      ASSERT_TRUE(ops::LinearBackward(&dx, &dw, with_bias ? &db : nullptr, dy, x, w).ok()) << what;

      const auto vx = Values(x), vw = Values(w), vdy = Values(dy);
      const auto vb = Values(Randn({c.n}, DType::kF32, gen));
      const std::vector<double>* bias = with_bias ? &vb : nullptr;
      const auto gx = NumericGradient(
          [&](const std::vector<double>& p) { return LinearLoss(p, vw, bias, vdy, m, c.n, c.k); },
          vx);
      const auto gw = NumericGradient(
          [&](const std::vector<double>& p) { return LinearLoss(vx, p, bias, vdy, m, c.n, c.k); },
          vw);
      if (Bf16DotRoutes(wdt)) {
        const Magnitudes mag = ProductMagnitudes(vdy, vx, vw, m, c.n, c.k);
        ExpectRoundedGradClose(Minus(Values(dx), dx0), gx, mag.dx, kOneRounded,
                               "dx (bf16 dot) " + what);
        ExpectRoundedGradClose(Minus(Values(dw), dw0), gw, mag.dw, kTwoRounded,
                               "dw (bf16 dot) " + what);
      } else {
        ExpectGradClose(Minus(Values(dx), dx0), gx, kTol, "dx " + what);
        ExpectGradClose(Minus(Values(dw), dw0), gw, kTol, "dw " + what);
      }
      if (with_bias) {
        const auto gb = NumericGradient(
            [&](const std::vector<double>& p) { return LinearLoss(vx, vw, &p, vdy, m, c.n, c.k); },
            vb);
        ExpectGradClose(Minus(Values(db), db0), gb, kTol, "dbias " + what);
      } else {
        EXPECT_EQ(Values(db), db0) << "dbias was not asked for " << what;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    DTypes, LinearBackwardTest,
    ::testing::Combine(::testing::ValuesIn(cpu::kAllIsaLevels),
                       ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                       ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                       ::testing::ValuesIn(testing::kAllLayouts)),
    [](const ::testing::TestParamInfo<LinearBackwardTest::ParamType>& info) {
      return absl::StrCat(cpu::IsaLevelName(std::get<0>(info.param)), "_x_",
                          DTypeName(std::get<1>(info.param)), "_w_",
                          DTypeName(std::get<2>(info.param)), "_",
                          testing::LayoutName(std::get<3>(info.param)));
    });

// fp64 reference gradients: dx = dy·w, dw = dyᵀ·x, dbias = sum_rows dy.
void ReferenceGrads(const std::vector<double>& x, const std::vector<double>& w,
                    const std::vector<double>& dy, int64_t m, int64_t n, int64_t k,
                    std::vector<double>* dx, std::vector<double>* dw, std::vector<double>* db) {
  dx->assign(m * k, 0.0);
  dw->assign(n * k, 0.0);
  db->assign(n, 0.0);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      const double g = dy[r * n + j];
      (*db)[j] += g;
      for (int64_t q = 0; q < k; ++q) {
        (*dx)[r * k + q] += g * w[j * k + q];
        (*dw)[j * k + q] += g * x[r * k + q];
      }
    }
  }
}

class LinearBackwardLargeTest : public testing::IsaLevelTest {};

TEST_P(LinearBackwardLargeTest, BlasPathMatchesReference) {
  // Enough rows for the multi-threaded OpenBLAS route; bf16 x is converted to f32 rows.
  Generator gen(102);
  const int64_t m = 300, k = 200, n = 150;
  for (DType wdt : {DType::kF32, DType::kBF16}) {
    const Tensor x = Randn({3, 100, k}, wdt, gen);
    const Tensor w = Randn({n, k}, wdt, gen);
    const Tensor dy = Randn({3, 100, n}, DType::kF32, gen);
    Tensor dx = ValueOrDie(Tensor::Zeros(x.shape(), DType::kF32));
    Tensor dw = ValueOrDie(Tensor::Zeros(w.shape(), DType::kF32));
    Tensor db = ValueOrDie(Tensor::Zeros({n}, DType::kF32));
    ASSERT_TRUE(ops::LinearBackward(&dx, &dw, &db, dy, x, w).ok());
    std::vector<double> rdx, rdw, rdb;
    ReferenceGrads(Values(x), Values(w), Values(dy), m, n, k, &rdx, &rdw, &rdb);
    if (Bf16DotRoutes(wdt)) {
      const Magnitudes mag = ProductMagnitudes(Values(dy), Values(x), Values(w), m, n, k);
      ExpectRoundedGradClose(Values(dx), rdx, mag.dx, kOneRounded, "large dx, w bf16 (bf16 dot)");
      ExpectRoundedGradClose(Values(dw), rdw, mag.dw, kTwoRounded, "large dw, w bf16 (bf16 dot)");
    } else {
      ExpectGradClose(Values(dx), rdx, kTol, absl::StrCat("large dx, w ", DTypeName(wdt)));
      ExpectGradClose(Values(dw), rdw, kTol, absl::StrCat("large dw, w ", DTypeName(wdt)));
    }
    ExpectGradClose(Values(db), rdb, kTol, absl::StrCat("large dbias, w ", DTypeName(wdt)));
  }
}

TEST_P(LinearBackwardLargeTest, BlockedBf16WeightsForDx) {
  // A bf16 weight of more than 2^22 elements is converted to f32 in several blocks of rows.
  Generator gen(103);
  const int64_t m = 3, k = 64, n = 70001;
  const Tensor x = Randn({m, k}, DType::kBF16, gen);
  const Tensor w = Randn({n, k}, DType::kBF16, gen);
  const Tensor dy = Randn({m, n}, DType::kF32, gen);
  Tensor dx = ValueOrDie(Tensor::Zeros({m, k}, DType::kF32));
  ASSERT_TRUE(ops::LinearBackward(&dx, nullptr, nullptr, dy, x, w).ok());
  const auto vw = Values(w), vdy = Values(dy);
  std::vector<double> want(m * k, 0.0);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t q = 0; q < k; ++q) want[r * k + q] += vdy[r * n + j] * vw[j * k + q];
    }
  }
  // sum over 70001 terms: f32 accumulation error grows with the length.
  if (Bf16DotRoutes(DType::kBF16)) {
    const Magnitudes mag = ProductMagnitudes(vdy, Values(x), vw, m, n, k);
    ExpectRoundedGradClose(Values(dx), want, mag.dx, kOneRounded + 1e-4, "bf16 dx (bf16 dot)");
  } else {
    ExpectGradClose(Values(dx), want, 1e-4, "blocked bf16 dx");
  }
}

CCTUNE_INSTANTIATE_ISA_LEVELS(LinearBackwardLargeTest);

TEST(LinearBackwardOptionsTest, OptionalOutputsAndAccumulation) {
  // Each gradient alone equals its value from the full call; a second call adds it again.
  Generator gen(104);
  const Tensor x = Randn({5, 12}, DType::kF32, gen);
  const Tensor w = Randn({7, 12}, DType::kBF16, gen);
  const Tensor dy = Randn({5, 7}, DType::kF32, gen);
  auto zeros = [](const Shape& s) { return ValueOrDie(Tensor::Zeros(s, DType::kF32)); };
  Tensor dx = zeros({5, 12}), dw = zeros({7, 12}), db = zeros({7});
  ASSERT_TRUE(ops::LinearBackward(&dx, &dw, &db, dy, x, w).ok());
  Tensor dx1 = zeros({5, 12}), dw1 = zeros({7, 12}), db1 = zeros({7});
  ASSERT_TRUE(ops::LinearBackward(&dx1, nullptr, nullptr, dy, x, w).ok());
  ASSERT_TRUE(ops::LinearBackward(nullptr, &dw1, nullptr, dy, x, w).ok());
  ASSERT_TRUE(ops::LinearBackward(nullptr, nullptr, &db1, dy, x, w).ok());
  EXPECT_EQ(Values(dx1), Values(dx));
  EXPECT_EQ(Values(dw1), Values(dw));
  EXPECT_EQ(Values(db1), Values(db));
  const auto once_x = Values(dx), once_w = Values(dw), once_b = Values(db);
  ASSERT_TRUE(ops::LinearBackward(&dx, &dw, &db, dy, x, w).ok());
  auto twice = [](std::vector<double> v) {
    for (double& e : v) e *= 2;
    return v;
  };
  testing::ExpectClose(Values(dx), twice(once_x), {1e-6}, 1e-6, "dx after two calls");
  testing::ExpectClose(Values(dw), twice(once_w), {1e-6}, 1e-6, "dw after two calls");
  testing::ExpectClose(Values(db), twice(once_b), {1e-6}, 1e-6, "dbias after two calls");
}

TEST(LinearBackwardOptionsTest, RejectsBadArguments) {
  Generator gen(105);
  const Tensor x = Randn({2, 3}, DType::kF32, gen);
  const Tensor w = Randn({4, 3}, DType::kF32, gen);
  const Tensor dy = Randn({2, 4}, DType::kF32, gen);
  Tensor dx = Randn({2, 3}, DType::kF32, gen);
  Tensor dw_bad = Randn({3, 4}, DType::kF32, gen);
  absl::Status st = ops::LinearBackward(&dx, &dw_bad, nullptr, dy, x, w);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("LinearBackward: dw has shape [3, 4]; expected [4, 3]"),
            std::string::npos)
      << st;
  Tensor dx_bf16 = Randn({2, 3}, DType::kBF16, gen);
  st = ops::LinearBackward(&dx_bf16, nullptr, nullptr, dy, x, w);
  EXPECT_NE(st.message().find("dx has dtype bf16; expected f32"), std::string::npos) << st;
  const Tensor dy_bad = Randn({2, 5}, DType::kF32, gen);
  st = ops::LinearBackward(&dx, nullptr, nullptr, dy_bad, x, w);
  EXPECT_NE(st.message().find("dy has shape [2, 5]; expected [2, 4]"), std::string::npos) << st;
  Tensor db_bad = Randn({3}, DType::kF32, gen);
  st = ops::LinearBackward(nullptr, nullptr, &db_bad, dy, x, w);
  EXPECT_NE(st.message().find("dbias has shape [3]; expected [4]"), std::string::npos) << st;
  const Tensor dy_wide = ValueOrDie(Randn({2, 4}, DType::kF32, gen).Expand({2, 4}));
  Tensor dx_bcast = ValueOrDie(Randn({1, 3}, DType::kF32, gen).Expand({2, 3}));
  st = ops::LinearBackward(&dx_bcast, nullptr, nullptr, dy_wide, x, w);
  EXPECT_NE(st.message().find("broadcast view cannot be written"), std::string::npos) << st;
}

}  // namespace
}  // namespace cctune
