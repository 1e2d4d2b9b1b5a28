#include "kernels/cpu/op_profile.h"

#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace cctune::cpu {
namespace {

void Sleep(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

const OpStats& Get(const OpProfile& p, OpCategory c) { return p[static_cast<int>(c)]; }

TEST(OpProfileTest, DisabledRecordsNothing) {
  SetOpProfiling(false);
  ResetOpProfile();
  { ScopedOpTimer t(OpCategory::kGemmForward, 10, 20); }
  EXPECT_EQ(Get(OpProfileSnapshot(), OpCategory::kGemmForward).calls, 0);
}

TEST(OpProfileTest, NestedTimeIsExclusiveAndCountsAdd) {
  SetOpProfiling(true);
  ResetOpProfile();
  const auto t0 = std::chrono::steady_clock::now();
  {
    ScopedOpTimer outer(OpCategory::kElementwiseBackward, 0, 8);
    Sleep(20);
    {
      ScopedOpTimer inner(OpCategory::kGemmBackwardDx, 100, 4);
      Sleep(30);
    }
  }
  const double total =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  SetOpProfiling(false);
  const OpProfile p = OpProfileSnapshot();
  const OpStats& outer = Get(p, OpCategory::kElementwiseBackward);
  const OpStats& inner = Get(p, OpCategory::kGemmBackwardDx);
  EXPECT_EQ(outer.calls, 1);
  EXPECT_EQ(inner.calls, 1);
  EXPECT_EQ(inner.flops, 100);
  EXPECT_EQ(outer.bytes, 8);
  EXPECT_GE(inner.seconds, 0.030);
  EXPECT_GE(outer.seconds, 0.020);
  // Exclusive: the two add up to no more than the wall time around both.
  EXPECT_LE(outer.seconds + inner.seconds, total);
}

TEST(OpProfileTest, CategoryOverrideNestsAndRestores) {
  SetOpProfiling(true);
  ResetOpProfile();
  {
    ScopedOpCategory opt(OpCategory::kOptimizer);
    { ScopedOpTimer t(OpCategory::kElementwiseForward, 0, 1); }
    {
      ScopedOpCategory data(OpCategory::kData);
      ScopedOpTimer t(OpCategory::kGemmForward, 0, 1);
    }
    { ScopedOpTimer t(OpCategory::kAttentionForward, 0, 1); }
  }
  { ScopedOpTimer t(OpCategory::kLoss, 0, 1); }
  SetOpProfiling(false);
  const OpProfile p = OpProfileSnapshot();
  EXPECT_EQ(Get(p, OpCategory::kOptimizer).calls, 2);
  EXPECT_EQ(Get(p, OpCategory::kData).calls, 1);
  EXPECT_EQ(Get(p, OpCategory::kLoss).calls, 1);
  EXPECT_EQ(Get(p, OpCategory::kElementwiseForward).calls, 0);
  EXPECT_EQ(Get(p, OpCategory::kGemmForward).calls, 0);
  EXPECT_EQ(Get(p, OpCategory::kAttentionForward).calls, 0);
  for (int c = 0; c < kNumOpCategories; ++c) {
    EXPECT_STRNE(OpCategoryName(static_cast<OpCategory>(c)), "?");
  }
}

}  // namespace
}  // namespace cctune::cpu
