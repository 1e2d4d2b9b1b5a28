#include "modules/feed_forward.h"

#include <string>

#include "core/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "modules/parameters.h"
#include "modules/reference.h"

namespace cctune {
namespace {

TEST(FeedForwardTest, SwiGluMatchesFp64Reference) {
  for (auto [d, f] : {std::pair<int64_t, int64_t>{8, 20}, {33, 17}}) {
    auto mlp = ValueOrDie(FeedForward::Create(std::make_unique<Linear>(d, f),
                                              std::make_unique<Linear>(f, d),
                                              std::make_unique<Linear>(d, f)));
    EXPECT_EQ(mlp->NumParameters(), 3 * d * f);
    auto arena = ValueOrDie(ParameterArena::Create(*mlp, DType::kF32, Device::Cpu()));
    EXPECT_EQ(arena.named_tensors()[0].first, "w1.weight");
    EXPECT_EQ(arena.named_tensors()[1].first, "w2.weight");
    EXPECT_EQ(arena.named_tensors()[2].first, "w3.weight");
    Generator gen(d);
    ASSERT_TRUE(arena.InitializeRandom(gen).ok());
    Tensor x = ValueOrDie(RandomNormal({2, 3, d}, DType::kF32, gen));
    const auto xv = reference::ToVec(x);
    const auto gate = reference::Linear(xv, 6, d, reference::ToVec(mlp->w1().weight()), f);
    const auto up = reference::Linear(xv, 6, d, reference::ToVec(mlp->w3().weight()), f);
    const auto want = reference::Linear(reference::SiluMul(gate, up), 6, f,
                                        reference::ToVec(mlp->w2().weight()), d);
    Tensor y = ValueOrDie((*mlp)(x));
    EXPECT_LE(reference::MaxRelError(reference::ToVec(y), want), 2e-6);
    ASSERT_TRUE(mlp->Forward(x, x).ok());  // in place
    EXPECT_LE(reference::MaxRelError(reference::ToVec(x), want), 2e-6);
  }
}

TEST(FeedForwardTest, DimsMustChain) {
  auto bad = FeedForward::Create(std::make_unique<Linear>(8, 16), std::make_unique<Linear>(12, 8),
                                 std::make_unique<Linear>(8, 16));
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), ::testing::HasSubstr("down_proj 12 -> 8"));
  EXPECT_FALSE(
      FeedForward::Create(nullptr, std::make_unique<Linear>(16, 8), std::make_unique<Linear>(8, 16))
          .ok());
}

}  // namespace
}  // namespace cctune
