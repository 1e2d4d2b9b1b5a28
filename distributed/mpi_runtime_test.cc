#include "distributed/mpi_runtime.h"

#include <sys/uio.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

std::string WriteScope(const std::string& value) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR")
                                                                  : "/tmp") +
                           "/ptrace_scope_" + value;
  std::ofstream(path) << value << "\n";
  return path;
}

// Whether this process may read its own memory with process_vm_readv (a seccomp filter that
// forbids the call forbids this too).
bool SelfReadWorks() {
  uint64_t src = 0x1234567890abcdefull, dst = 0;
  struct iovec local = {&dst, sizeof(dst)}, remote = {&src, sizeof(src)};
  return ::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0) ==
             static_cast<ssize_t>(sizeof(dst)) &&
         dst == src;
}

TEST(CmaBlocker, YamaScopeAboveZeroBlocksIt) {
  for (const char* scope : {"1", "2", "3"}) {
    const std::string why = CmaBlocker(WriteScope(scope).c_str());
    EXPECT_TRUE(absl::StrContains(why, std::string("ptrace_scope is ") + scope)) << why;
  }
}

TEST(CmaBlocker, ProbesAChildWhenYamaAllowsIt) {
  for (const std::string& path : {WriteScope("0"), std::string("/nonexistent/ptrace_scope")}) {
    const std::string why = CmaBlocker(path.c_str());
    if (!SelfReadWorks()) {
      EXPECT_TRUE(absl::StrContains(why, "process_vm_readv")) << why;
      continue;
    }
    // A process that may read itself may read its own child (same user, Yama permitting):
    // the probe must find CMA usable, i.e. it really read the child's word.
    EXPECT_EQ(why, "") << path;
  }
}

TEST(ConfigureSharedMemoryCopy, KeepsTheUsersSettingAndSetsOneOtherwise) {
  const char* var = "OMPI_MCA_btl_vader_single_copy_mechanism";
  ::setenv(var, "none", 1);
  EXPECT_EQ(ConfigureSharedMemoryCopy(),
            "none (OMPI_MCA_btl_vader_single_copy_mechanism, set by the user)");
  EXPECT_STREQ(std::getenv(var), "none");

  ::unsetenv(var);
  const std::string got = ConfigureSharedMemoryCopy();
  const char* set = std::getenv(var);
  ASSERT_NE(set, nullptr);
  if (CmaBlocker().empty()) {
    EXPECT_STREQ(set, "cma");
    EXPECT_EQ(got, "cma (single copy)");
  } else {
    EXPECT_STREQ(set, "none");
    EXPECT_TRUE(absl::StartsWith(got, "none (copy in/out: ")) << got;
  }
  ::unsetenv(var);
}

}  // namespace
}  // namespace cctune
