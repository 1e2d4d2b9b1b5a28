#include "training/lr_scheduler.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;

TEST(CosineScheduleTest, WarmupIsLinearFromZero) {
  auto s = CosineScheduleWithWarmup::Create(4, 20);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->Multiplier(0), 0.0);
  EXPECT_EQ(s->Multiplier(1), 0.25);
  EXPECT_EQ(s->Multiplier(3), 0.75);
  EXPECT_EQ(s->Lr(2e-4, 2), 1e-4);
}

TEST(CosineScheduleTest, HalfCosineDecayAfterWarmup) {
  auto s = CosineScheduleWithWarmup::Create(10, 110);
  ASSERT_TRUE(s.ok());
  EXPECT_DOUBLE_EQ(s->Multiplier(10), 1.0);
  EXPECT_NEAR(s->Multiplier(60), 0.5, 1e-15);  // halfway: cos(pi/2)
  EXPECT_NEAR(s->Multiplier(35), 0.5 * (1 + std::cos(M_PI * 0.25)), 1e-15);
  EXPECT_NEAR(s->Multiplier(110), 0.0, 1e-15);  // the end: cos(pi)
  // Monotone non-increasing between warmup and the end.
  for (int64_t t = 11; t <= 110; ++t) {
    EXPECT_LE(s->Multiplier(t), s->Multiplier(t - 1) + 1e-15) << t;
    EXPECT_GE(s->Multiplier(t), 0.0) << t;
  }
  // Past the end torchtune's formula keeps going: the cosine rises again.
  EXPECT_NEAR(s->Multiplier(160), 0.5, 1e-15);
}

TEST(CosineScheduleTest, MatchesTheFormulaForOtherCycles) {
  // num_cycles = 1: down to 0 at the middle and back up to 1.
  auto s = CosineScheduleWithWarmup::Create(0, 100, 1.0);
  ASSERT_TRUE(s.ok());
  for (int64_t t = 0; t <= 100; t += 7) {
    const double progress = t / 100.0;
    EXPECT_NEAR(s->Multiplier(t), std::max(0.0, 0.5 * (1 + std::cos(2 * M_PI * progress))), 1e-15)
        << t;
  }
  EXPECT_NEAR(s->Multiplier(100), 1.0, 1e-15);
  // No warmup and no steps: max(1, .) keeps it finite.
  auto degenerate = CosineScheduleWithWarmup::Create(0, 0);
  ASSERT_TRUE(degenerate.ok());
  EXPECT_EQ(degenerate->Multiplier(0), 1.0);
}

TEST(CosineScheduleTest, RejectsBadArguments) {
  EXPECT_THAT(std::string(CosineScheduleWithWarmup::Create(-1, 10).status().message()),
              HasSubstr("num_warmup_steps (-1)"));
  EXPECT_THAT(std::string(CosineScheduleWithWarmup::Create(1, -10).status().message()),
              HasSubstr("num_training_steps (-10)"));
  EXPECT_FALSE(CosineScheduleWithWarmup::Create(1, 10, NAN).ok());
}

}  // namespace
}  // namespace cctune
