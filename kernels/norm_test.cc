// RmsNorm and Softmax against fp64 references over dtypes, layouts, odd sizes and aliasing.
#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "core/random.h"
#include "gtest/gtest.h"
#include "kernels/cpu/op_test_util.h"
#include "kernels/ops.h"
#include "tests/util/float_near.h"

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

float RoundToDType(DType t, float v) {
  if (t == DType::kBF16) return Bf16ToFloat(FloatToBf16(v));
  if (t == DType::kF16) return F16ToFloat(FloatToF16(v));
  return v;
}

const std::vector<Shape>& Shapes() {
  static const std::vector<Shape> shapes = {{1}, {3}, {17}, {4, 129}, {2, 3, 64}, {5, 1}};
  return shapes;
}

// (x dtype, weight and out dtype, layout)
class RmsNormTest : public ::testing::TestWithParam<std::tuple<DType, DType, Layout>> {};

TEST_P(RmsNormTest, MatchesReference) {
  const auto [xt, ot, layout] = GetParam();
  Generator gen(31);
  const float eps = 1e-5f;
  for (const Shape& s : Shapes()) {
    const int64_t d = s.back();
    const Tensor x = WithLayout(Randn(s, xt, gen, 3.0), layout);
    const Tensor w = WithLayout(Randn({d}, ot, gen), layout);
    Tensor out = EmptyLike(s, ot, layout);
    ASSERT_TRUE(ops::RmsNorm(out, x, w, eps).ok());
    const auto vx = Values(x), vw = Values(w), vo = Values(out);
    const double rtol = 1e-5 + 2 * Roundoff(ot);
    int failures = 0;
    for (size_t r = 0; r < vx.size() / d; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < d; ++i) ss += vx[r * d + i] * vx[r * d + i];
      const double rstd = 1.0 / std::sqrt(ss / d + eps);
      for (int64_t i = 0; i < d; ++i) {
        const size_t e = r * d + i;
        const double y = vx[e] * rstd;
        // x·rstd is rounded to x's dtype before the weight (torchtune's type_as). Near a
        // rounding boundary the f32 kernel may round the other way: accept both neighbours.
        const double lo = RoundToDType(xt, static_cast<float>(y * (1 - 1e-6)));
        const double hi = RoundToDType(xt, static_cast<float>(y * (1 + 1e-6)));
        bool ok = false;
        for (double yr : {lo, hi}) {
          const double want = yr * vw[i];
          ok |= std::fabs(vo[e] - want) <= rtol * std::fabs(want) + SubnormalStep(ot);
        }
        if (!ok && ++failures <= 5) {
          ADD_FAILURE() << "RmsNorm " << ShapeToString(s) << " element " << e << " is " << vo[e]
                        << ", expected " << lo * vw[i];
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, RmsNormTest,
                         ::testing::Combine(::testing::ValuesIn(testing::kFloatTypes),
                                            ::testing::ValuesIn(testing::kFloatTypes),
                                            ::testing::ValuesIn(testing::kAllLayouts)),
                         [](const ::testing::TestParamInfo<RmsNormTest::ParamType>& info) {
                           return absl::StrCat("x_", DTypeName(std::get<0>(info.param)), "_out_",
                                               DTypeName(std::get<1>(info.param)), "_",
                                               testing::LayoutName(std::get<2>(info.param)));
                         });

TEST(RmsNormTest, RoundsNormalisedXToItsDTypeBeforeWeight) {
  // bf16 x with an f32 weight and f32 out: the result is bf16(x·rstd)·w exactly (in f32),
  // which differs from the unrounded product by up to 2^-9 relative.
  Generator gen(32);
  const Tensor x = Randn({2, 48}, DType::kBF16, gen);
  const Tensor w = Randn({48}, DType::kF32, gen);
  Tensor out = ValueOrDie(Tensor::Empty({2, 48}, DType::kF32));
  ASSERT_TRUE(ops::RmsNorm(out, x, w, 1e-6f).ok());
  const auto vx = Values(x), vw = Values(w), vo = Values(out);
  int exact = 0;
  for (int r = 0; r < 2; ++r) {
    double ss = 0;
    for (int i = 0; i < 48; ++i) ss += vx[r * 48 + i] * vx[r * 48 + i];
    const double rstd = 1.0 / std::sqrt(ss / 48 + 1e-6);
    for (int i = 0; i < 48; ++i) {
      const float y = RoundToDType(DType::kBF16, static_cast<float>(vx[r * 48 + i] * rstd));
      exact += vo[r * 48 + i] == static_cast<double>(y * static_cast<float>(vw[i]));
    }
  }
  EXPECT_GE(exact, 90);  // all but rounding-boundary cases
}

TEST(RmsNormTest, InPlace) {
  Generator gen(33);
  Tensor x = Randn({3, 33}, DType::kF32, gen);
  const Tensor w = Randn({33}, DType::kF32, gen);
  const auto vx = Values(x), vw = Values(w);
  ASSERT_TRUE(ops::RmsNorm(x, x, w, 1e-5f).ok());
  std::vector<double> want(vx.size());
  for (int r = 0; r < 3; ++r) {
    double ss = 0;
    for (int i = 0; i < 33; ++i) ss += vx[r * 33 + i] * vx[r * 33 + i];
    for (int i = 0; i < 33; ++i) {
      want[r * 33 + i] = vx[r * 33 + i] / std::sqrt(ss / 33 + 1e-5) * vw[i];
    }
  }
  ExpectClose(Values(x), want, {0.0}, 1e-5, "RmsNorm in place");
}

// The fused residual add + norm is bit-identical to Add then RmsNorm, for every dtype of the
// inputs, the sum and the output, every layout, and with the sum written over an input; the
// unfused pair is itself checked against fp64 above (RmsNorm) and in elementwise_test (Add).
TEST(AddRmsNormTest, BitIdenticalToAddThenRmsNorm) {
  Generator gen(36);
  int cases = 0;
  for (DType in : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (DType sum_t : {DType::kF32, DType::kBF16}) {
      for (Layout layout : testing::kAllLayouts) {
        for (bool over_a : {false, true}) {
          const Tensor a0 = WithLayout(Randn({2, 5, 37}, in, gen), layout);
          const Tensor b = WithLayout(Randn({2, 5, 37}, in, gen), layout);
          const Tensor w = Randn({37}, DType::kF32, gen);
          Tensor sum_ref = ValueOrDie(Tensor::Empty(a0.shape(), sum_t));
          Tensor norm_ref = ValueOrDie(Tensor::Empty(a0.shape(), DType::kF32));
          ASSERT_TRUE(ops::Add(sum_ref, a0, b).ok());
          ASSERT_TRUE(ops::RmsNorm(norm_ref, sum_ref, w, 1e-5f).ok());
          Tensor a = ValueOrDie(a0.Contiguous());
          if (over_a && in != sum_t) continue;  // the sum over a needs a's dtype
          Tensor sum = over_a ? a : WithLayout(ValueOrDie(Tensor::Empty(a0.shape(), sum_t)), layout);
          Tensor norm = WithLayout(ValueOrDie(Tensor::Empty(a0.shape(), DType::kF32)), layout);
          ASSERT_TRUE(ops::AddRmsNorm(sum, norm, a, b, w, 1e-5f).ok());
          EXPECT_EQ(Values(sum), Values(sum_ref)) << DTypeName(in) << " " << DTypeName(sum_t);
          EXPECT_EQ(Values(norm), Values(norm_ref)) << DTypeName(in) << " " << DTypeName(sum_t);
          ++cases;
        }
      }
    }
  }
  EXPECT_GT(cases, 20);
  // Errors name the tensor and the value.
  const Tensor a = Randn({2, 8}, DType::kF32, gen);
  Tensor out = ValueOrDie(Tensor::Empty({2, 8}, DType::kF32));
  Tensor bad = ValueOrDie(Tensor::Empty({2, 4}, DType::kF32));
  const Tensor w = Randn({8}, DType::kF32, gen);
  absl::Status st = ops::AddRmsNorm(out, bad, a, a, w, 1e-5f);
  EXPECT_NE(st.message().find("AddRmsNorm: norm has shape [2, 4]; expected [2, 8]"),
            std::string::npos)
      << st;
  st = ops::AddRmsNorm(out, out, a, a, w, -2.f);
  EXPECT_NE(st.message().find("AddRmsNorm: eps (-2) must be finite and >= 0"), std::string::npos)
      << st;
}

class SoftmaxTest : public ::testing::TestWithParam<std::tuple<DType, Layout>> {};

TEST_P(SoftmaxTest, MatchesReference) {
  const auto [dt, layout] = GetParam();
  Generator gen(34);
  for (const Shape& s : Shapes()) {
    const int64_t d = s.back();
    const Tensor x = WithLayout(Randn(s, dt, gen, 5.0), layout);
    Tensor out = EmptyLike(s, dt, layout);
    ASSERT_TRUE(ops::Softmax(out, x).ok());
    const auto vx = Values(x);
    std::vector<double> want(vx.size());
    for (size_t r = 0; r < vx.size() / d; ++r) {
      double mx = -INFINITY, sum = 0;
      for (int64_t i = 0; i < d; ++i) mx = std::max(mx, vx[r * d + i]);
      for (int64_t i = 0; i < d; ++i) sum += std::exp(vx[r * d + i] - mx);
      for (int64_t i = 0; i < d; ++i) want[r * d + i] = std::exp(vx[r * d + i] - mx) / sum;
    }
    ExpectClose(Values(out), want, {1e-7 + SubnormalStep(dt)}, 1e-5 + 2 * Roundoff(dt),
                "Softmax " + ShapeToString(s));
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, SoftmaxTest,
                         ::testing::Combine(::testing::ValuesIn(testing::kFloatTypes),
                                            ::testing::ValuesIn(testing::kAllLayouts)),
                         [](const ::testing::TestParamInfo<SoftmaxTest::ParamType>& info) {
                           return absl::StrCat(DTypeName(std::get<0>(info.param)), "_",
                                               testing::LayoutName(std::get<1>(info.param)));
                         });

TEST(SoftmaxTest, MaskedEntriesInPlaceAndAllMaskedRow) {
  const float inf = std::numeric_limits<float>::infinity();
  Tensor x = ValueOrDie(Tensor::FromVector(
      std::vector<float>{1.f, -inf, 3.f, -inf, 1000.f, 999.f, -inf, -inf, -inf}, {3, 3}));
  ASSERT_TRUE(ops::Softmax(x, x).ok());
  const auto v = Values(x);
  const double e = std::exp(-2.0);
  // Within 4 float ULPs (exp, sum and division each round; an absolute 1e-7 was 1.7 ULPs at
  // 0.88, so one rounding more on another ISA path would have failed it).
  EXPECT_TRUE(testing::FloatNear(v[0], e / (1 + e), 0, 4));
  EXPECT_EQ(v[1], 0.0);
  EXPECT_TRUE(testing::FloatNear(v[2], 1 / (1 + e), 0, 4));
  EXPECT_EQ(v[3], 0.0);
  EXPECT_TRUE(testing::FloatNear(v[4], 1 / (1 + std::exp(-1.0)), 0, 4));  // large logits: finite
  EXPECT_TRUE(std::isnan(v[6]) && std::isnan(v[7]) && std::isnan(v[8]));  // as torch
}

TEST(NormErrorsTest, MessagesNameTheOffendingValues) {
  Generator gen(35);
  const Tensor x = Randn({2, 8}, DType::kF32, gen);
  const Tensor w = Randn({7}, DType::kF32, gen);
  Tensor out = ValueOrDie(Tensor::Empty({2, 8}, DType::kF32));
  absl::Status st = ops::RmsNorm(out, x, w, 1e-5f);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("RmsNorm: weight has shape [7]; expected [8]"), std::string::npos)
      << st;
  const Tensor w8 = Randn({8}, DType::kF32, gen);
  st = ops::RmsNorm(out, x, w8, -1.f);
  EXPECT_NE(st.message().find("RmsNorm: eps (-1) must be finite and >= 0"), std::string::npos)
      << st;
  Tensor small = ValueOrDie(Tensor::Empty({2, 4}, DType::kF32));
  st = ops::Softmax(small, x);
  EXPECT_NE(st.message().find("Softmax: out has shape [2, 4]; expected [2, 8]"), std::string::npos)
      << st;
}

}  // namespace
}  // namespace cctune
