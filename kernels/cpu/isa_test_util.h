// Test helpers that run CPU kernels at every ISA level (kernels/cpu/isa.h) the process can run,
// so each SIMD path is checked on every machine that has it:
//
//   class GemmLevelTest : public testing::IsaLevelTest {};
//   TEST_P(GemmLevelTest, MatchesFp64) { ... GemmNT(...) runs at GetParam() ... }
//   CCTUNE_INSTANTIATE_ISA_LEVELS(GemmLevelTest);
//
// A level above the CPU's (or above CCTUNE_CPU_ISA) is skipped with a GTEST_SKIP message that
// names the level and the process's; inside the test the level is forced with ScopedIsaLevel.
#ifndef CCTUNE_KERNELS_CPU_ISA_TEST_UTIL_H_
#define CCTUNE_KERNELS_CPU_ISA_TEST_UTIL_H_

#include <memory>
#include <string>
#include <tuple>

#include "gtest/gtest.h"
#include "kernels/cpu/isa.h"

namespace cctune::testing {

// Why `level` cannot run in this process ("" if it can).
std::string IsaSkipReason(cpu::IsaLevel level);

// Parameterised fixture: SetUp skips unsupported levels and forces the parameter's level for
// the test body.
class IsaLevelTest : public ::testing::TestWithParam<cpu::IsaLevel> {
 protected:
  void SetUp() override;
  void TearDown() override { scoped_.reset(); }

 private:
  std::unique_ptr<cpu::ScopedIsaLevel> scoped_;
};

// For suites with parameters of their own: the level is the tuple's first element, e.g.
//   class LinearTest : public testing::IsaLevelTupleTest<DType, Layout> {};
//   INSTANTIATE_TEST_SUITE_P(..., Combine(ValuesIn(cpu::kAllIsaLevels), ...), ...);
template <typename... Ts>
class IsaLevelTupleTest : public ::testing::TestWithParam<std::tuple<cpu::IsaLevel, Ts...>> {
 protected:
  void SetUp() override {
    const cpu::IsaLevel level = std::get<0>(this->GetParam());
    const std::string why = IsaSkipReason(level);
    if (!why.empty()) GTEST_SKIP() << why;
    scoped_ = std::make_unique<cpu::ScopedIsaLevel>(level);
  }
  void TearDown() override { scoped_.reset(); }

 private:
  std::unique_ptr<cpu::ScopedIsaLevel> scoped_;
};

// Test names such as MatchesFp64/avx512_bf16.
std::string IsaLevelParamName(const ::testing::TestParamInfo<cpu::IsaLevel>& info);

}  // namespace cctune::testing

#define CCTUNE_INSTANTIATE_ISA_LEVELS(suite)                               \
  INSTANTIATE_TEST_SUITE_P(IsaLevels, suite,                               \
                           ::testing::ValuesIn(::cctune::cpu::kAllIsaLevels), \
                           ::cctune::testing::IsaLevelParamName)

// In a plain TEST body: skip unless `level` can run here.
#define CCTUNE_SKIP_UNLESS_ISA(level)                                            \
  do {                                                                           \
    const std::string cctune_isa_skip_ = ::cctune::testing::IsaSkipReason(level); \
    if (!cctune_isa_skip_.empty()) GTEST_SKIP() << cctune_isa_skip_;             \
  } while (0)

#endif  // CCTUNE_KERNELS_CPU_ISA_TEST_UTIL_H_
