#include "modules/linear.h"

#include <string>

#include "core/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/gemm/gemm.h"
#include "modules/parameters.h"
#include "modules/reference.h"

namespace cctune {
namespace {

using reference::MaxRelError;
using reference::ToVec;

struct Case {
  int64_t rows_a, rows_b, in, out;
  bool bias;
  DType weight_dtype;
};

class LinearTest : public ::testing::TestWithParam<Case> {};

TEST_P(LinearTest, MatchesFp64Reference) {
  const Case c = GetParam();
  Linear lin(c.in, c.out, c.bias);
  EXPECT_EQ(lin.NumParameters(), c.in * c.out + (c.bias ? c.out : 0));
  auto arena = ValueOrDie(ParameterArena::Create(lin, c.weight_dtype, Device::Cpu()));
  Generator gen(c.in * 131 + c.out);
  ASSERT_TRUE(arena.InitializeRandom(gen).ok());
  if (c.bias) {
    Tensor bias = arena.named_tensors()[1].second;
    ASSERT_TRUE(FillNormal(bias, 0.0, 1.0, gen).ok());
  }
  Tensor x = ValueOrDie(RandomNormal({c.rows_a, c.rows_b, c.in}, DType::kF32, gen));
  const int64_t rows = c.rows_a * c.rows_b;
  auto reference_over = [&](const reference::Vec& xs) {
    return reference::Linear(xs, rows, c.in, ToVec(lin.weight()), c.out,
                             c.bias ? ToVec(*lin.bias()) : reference::Vec{});
  };
  {
    cpu::ScopedExactGemm exact;  // f32 activations: f32 precision
    Tensor y = ValueOrDie(lin(x));
    EXPECT_EQ(y.shape(), (Shape{c.rows_a, c.rows_b, c.out}));
    EXPECT_EQ(y.dtype(), DType::kF32);
    EXPECT_LE(MaxRelError(ToVec(y), reference_over(ToVec(x))), 2e-6);
  }
  // The default routes may round x to bf16 for bf16 weights (kernels/cpu/gemm/gemm.h): then
  // the reference over that rounded x agrees to f32 precision.
  const bool rounds_x = c.weight_dtype == DType::kBF16 &&
                        cpu::gemm_internal::AutoBf16Route(rows) != cpu::gemm_internal::GemmIsa::kAuto;
  reference::Vec xs = ToVec(x);
  if (rounds_x) {
    for (double& v : xs) v = Bf16ToFloat(FloatToBf16(static_cast<float>(v)));
  }
  EXPECT_LE(MaxRelError(ToVec(ValueOrDie(lin(x))), reference_over(xs)), 2e-6) << rounds_x;
}

INSTANTIATE_TEST_SUITE_P(Shapes, LinearTest,
                         ::testing::Values(Case{1, 1, 8, 4, false, DType::kF32},
                                           Case{2, 3, 17, 33, true, DType::kF32},
                                           Case{3, 5, 64, 7, false, DType::kBF16},
                                           Case{1, 9, 31, 130, true, DType::kBF16}));

TEST(LinearTest, ReadsNonContiguousInputs) {
  Linear lin(6, 5, true);
  auto arena = ValueOrDie(ParameterArena::Create(lin, DType::kF32, Device::Cpu()));
  Generator gen(3);
  ASSERT_TRUE(arena.InitializeRandom(gen).ok());
  Tensor xt = ValueOrDie(RandomNormal({6, 4}, DType::kF32, gen));
  Tensor x = ValueOrDie(xt.Transpose(0, 1));  // [4, 6], strides (1, 4)
  Tensor y = ValueOrDie(lin(x));
  const auto want = reference::Linear(ToVec(ValueOrDie(x.Contiguous())), 4, 6, ToVec(lin.weight()),
                                      5, ToVec(*lin.bias()));
  EXPECT_LE(MaxRelError(ToVec(y), want), 2e-6);
}

TEST(LinearTest, RegistersTorchNamesAndNeedsAnArena) {
  Linear lin(3, 2, true);
  auto named = lin.NamedParameters();
  ASSERT_EQ(named.size(), 2u);
  EXPECT_EQ(named[0].first, "weight");
  EXPECT_EQ(named[0].second->shape, (Shape{2, 3}));
  EXPECT_EQ(named[1].first, "bias");
  Tensor x = ValueOrDie(Tensor::Zeros({1, 3}, DType::kF32));
  auto y = lin(x);
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(y.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(LinearTest, WrongInputWidthIsAnError) {
  Linear lin(3, 2);
  auto arena = ValueOrDie(ParameterArena::Create(lin, DType::kF32, Device::Cpu()));
  Tensor x = ValueOrDie(Tensor::Zeros({2, 4}, DType::kF32));
  EXPECT_FALSE(lin(x).ok());
}

}  // namespace
}  // namespace cctune
