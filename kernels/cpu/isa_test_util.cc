#include "kernels/cpu/isa_test_util.h"

namespace cctune::testing {

std::string IsaSkipReason(cpu::IsaLevel level) {
  if (static_cast<int>(level) <= static_cast<int>(cpu::MaxIsaLevel())) return "";
  std::string why = std::string("ISA level ") + cpu::IsaLevelName(level) +
                    " not available: this process runs up to " +
                    cpu::IsaLevelName(cpu::MaxIsaLevel()) + " (CPU: " +
                    cpu::IsaLevelName(cpu::CpuIsaLevel()) + ")";
  if (cpu::MaxIsaLevel() != cpu::CpuIsaLevel()) why += ", lowered by CCTUNE_CPU_ISA";
  return why;
}

void IsaLevelTest::SetUp() {
  const std::string why = IsaSkipReason(GetParam());
  if (!why.empty()) GTEST_SKIP() << why;
  scoped_ = std::make_unique<cpu::ScopedIsaLevel>(GetParam());
}

std::string IsaLevelParamName(const ::testing::TestParamInfo<cpu::IsaLevel>& info) {
  return cpu::IsaLevelName(info.param);
}

}  // namespace cctune::testing
