#include "modules/rms_norm.h"

#include "core/random.h"
#include "gtest/gtest.h"
#include "modules/parameters.h"
#include "modules/reference.h"

namespace cctune {
namespace {

TEST(RMSNormTest, MatchesFp64ReferenceOnOddShapes) {
  for (int64_t d : {1, 7, 64, 129}) {
    RMSNorm norm(d, 1e-5f);
    auto arena = ValueOrDie(ParameterArena::Create(norm, DType::kF32, Device::Cpu()));
    Generator gen(d);
    Tensor scale = ValueOrDie(arena.Get("scale"));
    ASSERT_TRUE(FillNormal(scale, 1.0, 0.3, gen).ok());
    Tensor x = ValueOrDie(RandomNormal({3, 5, d}, DType::kF32, gen));
    Tensor y = ValueOrDie(norm(x));
    const auto want = reference::RmsNorm(reference::ToVec(x), 15, d, reference::ToVec(scale), 1e-5);
    EXPECT_LE(reference::MaxRelError(reference::ToVec(y), want), 2e-6) << "d=" << d;
  }
}

TEST(RMSNormTest, InPlaceAndStridedInput) {
  RMSNorm norm(6, 1e-6f);
  auto arena = ValueOrDie(ParameterArena::Create(norm, DType::kF32, Device::Cpu()));
  Generator gen(1);
  Tensor scale = arena.named_tensors()[0].second;
  ASSERT_TRUE(FillNormal(scale, 1.0, 0.3, gen).ok());
  Tensor base = ValueOrDie(RandomNormal({4, 2, 6}, DType::kF32, gen));
  Tensor x = ValueOrDie(base.Transpose(0, 1));  // [2, 4, 6], not contiguous
  const auto want =
      reference::RmsNorm(reference::ToVec(x), 8, 6, reference::ToVec(norm.scale()), 1e-6);
  ASSERT_TRUE(norm.Forward(x, x).ok());  // in place through the view
  EXPECT_LE(reference::MaxRelError(reference::ToVec(x), want), 2e-6);
}

TEST(RMSNormTest, ScaleStartsAtOnes) {
  RMSNorm norm(5);
  EXPECT_EQ(norm.eps(), 1e-6f);
  auto arena = ValueOrDie(ParameterArena::Create(norm, DType::kBF16, Device::Cpu()));
  Generator gen(2);
  ASSERT_TRUE(arena.InitializeRandom(gen).ok());
  for (double v : reference::ToVec(norm.scale())) EXPECT_EQ(v, 1.0);
  EXPECT_EQ(norm.NamedParameters()[0].first, "scale");
}

}  // namespace
}  // namespace cctune
