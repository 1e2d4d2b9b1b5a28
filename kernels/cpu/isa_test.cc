#include "kernels/cpu/isa.h"

#include <cstdlib>

#include "gtest/gtest.h"
#include "kernels/cpu/isa_test_util.h"

namespace cctune::cpu {
namespace {

TEST(IsaTest, NamesRoundTrip) {
  for (IsaLevel l : kAllIsaLevels) {
    auto parsed = ParseIsaLevel(IsaLevelName(l));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, l);
  }
}

TEST(IsaTest, UnknownNameListsTheAllowedValues) {
  for (const char* bad : {"", "AVX2", "avx-512", "sse4", "avx2 "}) {
    auto parsed = ParseIsaLevel(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find("scalar, avx2, avx512, avx512_bf16"),
              std::string::npos)
        << parsed.status();
  }
}

// The ceiling is the CPU's level, lowered (never raised) by CCTUNE_CPU_ISA.
TEST(IsaTest, MaxLevelFollowsTheEnvironmentClampedToTheCpu) {
  const char* env = std::getenv("CCTUNE_CPU_ISA");
  EXPECT_LE(static_cast<int>(MaxIsaLevel()), static_cast<int>(CpuIsaLevel()));
  if (env == nullptr || *env == '\0') {
    EXPECT_EQ(MaxIsaLevel(), CpuIsaLevel());
  } else {
    const IsaLevel want = ParseIsaLevel(env).value();
    EXPECT_EQ(static_cast<int>(MaxIsaLevel()),
              std::min(static_cast<int>(want), static_cast<int>(CpuIsaLevel())));
  }
  EXPECT_EQ(ActiveIsaLevel(), MaxIsaLevel());
  std::printf("CPU: %s, process: %s\n", IsaLevelName(CpuIsaLevel()), IsaLevelName(MaxIsaLevel()));
}

TEST(IsaTest, ScopedLevelLowersAndRestores) {
  const IsaLevel max = MaxIsaLevel();
  {
    ScopedIsaLevel s(IsaLevel::kScalar);
    EXPECT_EQ(ActiveIsaLevel(), IsaLevel::kScalar);
    EXPECT_TRUE(IsaSupported(IsaLevel::kScalar));
    EXPECT_FALSE(IsaSupported(IsaLevel::kAvx2));
    {
      ScopedIsaLevel inner(max);
      EXPECT_EQ(ActiveIsaLevel(), max);
    }
    EXPECT_EQ(ActiveIsaLevel(), IsaLevel::kScalar);
  }
  EXPECT_EQ(ActiveIsaLevel(), max);
}

TEST(IsaTest, SupportedLevelsAreThoseUpToTheMax) {
  const std::vector<IsaLevel> levels = SupportedIsaLevels();
  ASSERT_FALSE(levels.empty());
  EXPECT_EQ(levels.front(), IsaLevel::kScalar);
  EXPECT_EQ(levels.back(), MaxIsaLevel());
  EXPECT_EQ(levels.size(), static_cast<size_t>(MaxIsaLevel()) + 1);
}

TEST(IsaDeathTest, ScopedLevelAboveTheMaxAborts) {
  if (MaxIsaLevel() == IsaLevel::kAvx512Bf16) GTEST_SKIP() << "no level above avx512_bf16";
  EXPECT_DEATH(ScopedIsaLevel s(IsaLevel::kAvx512Bf16), "above this process's level");
}

// Death tests in the "threadsafe" style re-execute the binary, so MaxIsaLevel() is computed
// afresh in the child, from the environment the statement sets.
TEST(IsaDeathTest, UnknownEnvironmentValueAbortsWithTheAllowedValues) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        setenv("CCTUNE_CPU_ISA", "avx3", 1);
        MaxIsaLevel();
      },
      "CCTUNE_CPU_ISA: unknown ISA level \"avx3\"; allowed: scalar, avx2, avx512, avx512_bf16");
}

TEST(IsaDeathTest, EnvironmentLowersTheLevel) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("CCTUNE_CPU_ISA", "scalar", 1);
        std::exit(MaxIsaLevel() == IsaLevel::kScalar && !IsaSupported(IsaLevel::kAvx2) ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(IsaDeathTest, LevelAboveTheCpuIsClampedWithOneWarning) {
  if (CpuIsaLevel() == IsaLevel::kAvx512Bf16) GTEST_SKIP() << "the CPU has every level";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string warning = std::string("CCTUNE_CPU_ISA=avx512_bf16, but this CPU supports up to ") +
                              IsaLevelName(CpuIsaLevel());
  EXPECT_EXIT(
      {
        setenv("CCTUNE_CPU_ISA", "avx512_bf16", 1);
        MaxIsaLevel();
        std::exit(MaxIsaLevel() == CpuIsaLevel() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), warning);
}

class IsaLevelFixtureTest : public testing::IsaLevelTest {};

// The fixture forces the parameter's level (and skips, naming both levels, when it cannot).
TEST_P(IsaLevelFixtureTest, ForcesItsLevel) { EXPECT_EQ(ActiveIsaLevel(), GetParam()); }

CCTUNE_INSTANTIATE_ISA_LEVELS(IsaLevelFixtureTest);

TEST(IsaTestUtil, SkipReasonNamesBothLevels) {
  if (MaxIsaLevel() == IsaLevel::kAvx512Bf16) GTEST_SKIP() << "every level runs here";
  const std::string why = testing::IsaSkipReason(IsaLevel::kAvx512Bf16);
  EXPECT_NE(why.find("avx512_bf16"), std::string::npos) << why;
  EXPECT_NE(why.find(IsaLevelName(MaxIsaLevel())), std::string::npos) << why;
  EXPECT_EQ(testing::IsaSkipReason(IsaLevel::kScalar), "");
}

}  // namespace
}  // namespace cctune::cpu
