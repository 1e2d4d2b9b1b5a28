// RmsNormBackward and SoftmaxBackward against fp64 central finite differences of fp64
// forwards: odd row lengths, strided views of every tensor, accumulation (RmsNorm) and in-place
// writes (Softmax), bf16 inputs (RmsNorm rounds x̂ to bf16 in its forward), the optional
// weight gradient, results independent of the thread count, and argument errors.
#include <omp.h>

#include <cmath>
#include <vector>

#include "core/random.h"
#include "gtest/gtest.h"
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

double RoundToBf16(double x) {
  return static_cast<double>(Bf16ToFloat(FloatToBf16(static_cast<float>(x))));
}

// fp64 RMSNorm loss sum(dy · x̂ · w) over rows of length d; x̂ rounded to bf16 when asked.
double RmsNormLoss(const std::vector<double>& x, const std::vector<double>& w,
                   const std::vector<double>& dy, int64_t d, double eps, bool round_bf16) {
  double loss = 0;
  for (size_t r = 0; r < x.size() / d; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += x[r * d + i] * x[r * d + i];
    const double rstd = 1.0 / std::sqrt(ss / d + eps);
    for (int64_t i = 0; i < d; ++i) {
      double xh = x[r * d + i] * rstd;
      if (round_bf16) xh = RoundToBf16(xh);
      loss += dy[r * d + i] * xh * w[i];
    }
  }
  return loss;
}

class RmsNormBackwardTest : public ::testing::TestWithParam<Layout> {};

TEST_P(RmsNormBackwardTest, MatchesFiniteDifferences) {
  const Layout layout = GetParam();
  Generator gen(301);
  const float eps = 1e-5f;
  for (const Shape& shape : {Shape{1, 1}, Shape{3, 7}, Shape{2, 3, 17}, Shape{4, 64}}) {
    const int64_t d = shape.back();
    const std::string what = ShapeToString(shape);
    const Tensor x = WithLayout(Randn(shape, DType::kF32, gen), layout);
    const Tensor w = WithLayout(Randn({d}, DType::kF32, gen), layout);
    const Tensor dy = WithLayout(Randn(shape, DType::kF32, gen), layout);
    Tensor dx = WithLayout(Randn(shape, DType::kF32, gen), layout);
    Tensor dw = WithLayout(Randn({d}, DType::kF32, gen), layout);
    const auto dx0 = Values(dx), dw0 = Values(dw);
    ASSERT_TRUE(ops::RmsNormBackward(dx, &dw, dy, x, w, eps).ok()) << what;
    const auto vx = Values(x), vw = Values(w), vdy = Values(dy);
    const auto gx = NumericGradient(
        [&](const std::vector<double>& p) { return RmsNormLoss(p, vw, vdy, d, eps, false); }, vx);
    const auto gw = NumericGradient(
        [&](const std::vector<double>& p) { return RmsNormLoss(vx, p, vdy, d, eps, false); }, vw);
    ExpectGradClose(Minus(Values(dx), dx0), gx, 1e-5, "dx " + what);
    ExpectGradClose(Minus(Values(dw), dw0), gw, 1e-5, "dweight " + what);

    // Without a weight gradient, dx is the same.
    Tensor dx2 = WithLayout(
        ValueOrDie(Tensor::FromVector(std::vector<float>(dx0.begin(), dx0.end()), shape)), layout);
    ASSERT_TRUE(ops::RmsNormBackward(dx2, nullptr, dy, x, w, eps).ok()) << what;
    EXPECT_EQ(Values(dx2), Values(dx)) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, RmsNormBackwardTest, ::testing::ValuesIn(testing::kAllLayouts),
                         [](const ::testing::TestParamInfo<Layout>& info) {
                           return testing::LayoutName(info.param);
                         });

TEST(RmsNormBackwardBf16Test, WeightGradUsesRoundedNormAndDxIsStraightThrough) {
  // bf16 x: the forward rounds x̂ to bf16 before the weight multiply. That rounding does not
  // depend on the weight, so dweight matches finite differences of the rounded forward
  // exactly; dx (rounding as identity) matches the unrounded one.
  Generator gen(302);
  const Shape shape{6, 19};
  const Tensor x = Randn(shape, DType::kBF16, gen);
  const Tensor w = Randn({19}, DType::kBF16, gen);
  const Tensor dy = Randn(shape, DType::kF32, gen);
  Tensor dx = ValueOrDie(Tensor::Zeros(shape, DType::kF32));
  Tensor dw = ValueOrDie(Tensor::Zeros({19}, DType::kF32));
  ASSERT_TRUE(ops::RmsNormBackward(dx, &dw, dy, x, w, 1e-6f).ok());
  const auto vx = Values(x), vw = Values(w), vdy = Values(dy);
  const auto gw = NumericGradient(
      [&](const std::vector<double>& p) { return RmsNormLoss(vx, p, vdy, 19, 1e-6, true); }, vw);
  const auto gx = NumericGradient(
      [&](const std::vector<double>& p) { return RmsNormLoss(p, vw, vdy, 19, 1e-6, false); }, vx);
  ExpectGradClose(Values(dw), gw, 1e-5, "bf16 dweight");
  ExpectGradClose(Values(dx), gx, 1e-5, "bf16 dx");
}

TEST(RmsNormBackwardDeterminismTest, SameBitsForAnyThreadCount) {
  Generator gen(303);
  const Tensor x = Randn({777, 130}, DType::kF32, gen);
  const Tensor w = Randn({130}, DType::kF32, gen);
  const Tensor dy = Randn({777, 130}, DType::kF32, gen);
  const int saved = omp_get_max_threads();
  std::vector<double> first_dx, first_dw;
  for (int threads : {1, 4, 16}) {
    omp_set_num_threads(threads);
    Tensor dx = ValueOrDie(Tensor::Zeros({777, 130}, DType::kF32));
    Tensor dw = ValueOrDie(Tensor::Zeros({130}, DType::kF32));
    ASSERT_TRUE(ops::RmsNormBackward(dx, &dw, dy, x, w, 1e-5f).ok());
    if (first_dw.empty()) {
      first_dx = Values(dx);
      first_dw = Values(dw);
    } else {
      EXPECT_EQ(Values(dx), first_dx) << threads << " threads";
      EXPECT_EQ(Values(dw), first_dw) << threads << " threads";
    }
  }
  omp_set_num_threads(saved);
}

TEST(RmsNormBackwardTest, RejectsBadArguments) {
  Generator gen(304);
  const Tensor x = Randn({2, 5}, DType::kF32, gen);
  const Tensor w = Randn({5}, DType::kF32, gen);
  const Tensor dy = Randn({2, 5}, DType::kF32, gen);
  Tensor dx = Randn({2, 5}, DType::kF32, gen);
  Tensor dw_bad = Randn({4}, DType::kF32, gen);
  absl::Status st = ops::RmsNormBackward(dx, &dw_bad, dy, x, w, 1e-5f);
  EXPECT_NE(st.message().find("RmsNormBackward: dweight has shape [4]; expected [5]"),
            std::string::npos)
      << st;
  const Tensor dy_bf16 = Randn({2, 5}, DType::kBF16, gen);
  st = ops::RmsNormBackward(dx, nullptr, dy_bf16, x, w, 1e-5f);
  EXPECT_NE(st.message().find("dy has dtype bf16; expected f32"), std::string::npos) << st;
  st = ops::RmsNormBackward(dx, nullptr, dy, x, w, -1.f);
  EXPECT_NE(st.message().find("eps (-1) must be finite and >= 0"), std::string::npos) << st;
}

// fp64 softmax loss sum(dy · softmax(x)) over rows of length d.
double SoftmaxLoss(const std::vector<double>& x, const std::vector<double>& dy, int64_t d) {
  double loss = 0;
  for (size_t r = 0; r < x.size() / d; ++r) {
    double mx = -INFINITY, sum = 0;
    for (int64_t i = 0; i < d; ++i) mx = std::max(mx, x[r * d + i]);
    for (int64_t i = 0; i < d; ++i) sum += std::exp(x[r * d + i] - mx);
    for (int64_t i = 0; i < d; ++i) loss += dy[r * d + i] * std::exp(x[r * d + i] - mx) / sum;
  }
  return loss;
}

class SoftmaxBackwardTest : public ::testing::TestWithParam<Layout> {};

TEST_P(SoftmaxBackwardTest, MatchesFiniteDifferences) {
  const Layout layout = GetParam();
  Generator gen(305);
  for (const Shape& shape : {Shape{1, 1}, Shape{3, 7}, Shape{2, 3, 17}, Shape{2, 100}}) {
    for (bool in_place : {false, true}) {
      const int64_t d = shape.back();
      const std::string what = absl::StrCat(ShapeToString(shape), in_place ? " in place" : "");
      const Tensor x = WithLayout(Randn(shape, DType::kF32, gen, 2.0), layout);
      Tensor y = EmptyLike(shape, DType::kF32, layout);
      ASSERT_TRUE(ops::Softmax(y, x).ok());
      Tensor dy = WithLayout(Randn(shape, DType::kF32, gen), layout);
      const auto vdy = Values(dy);
      Tensor dx = in_place ? dy : WithLayout(Randn(shape, DType::kF32, gen), layout);
      ASSERT_TRUE(ops::SoftmaxBackward(dx, dy, y).ok()) << what;
      const auto want = NumericGradient(
          [&](const std::vector<double>& p) { return SoftmaxLoss(p, vdy, d); }, Values(x));
      ExpectGradClose(Values(dx), want, 1e-5, "softmax dx (written) " + what);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, SoftmaxBackwardTest, ::testing::ValuesIn(testing::kAllLayouts),
                         [](const ::testing::TestParamInfo<Layout>& info) {
                           return testing::LayoutName(info.param);
                         });

}  // namespace
}  // namespace cctune
