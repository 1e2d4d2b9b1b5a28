#include "core/backend_library.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "core/device_interface.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp ? tmp : "/tmp") + "/backend_library_test_" + name;
}

TEST(BackendLibraryTest, LooksBesideTheBinaryAndInItsRunfiles) {
  ::unsetenv("CCTUNE_CUDA_LIBRARY");
  EXPECT_STREQ(BackendLibraryName(DeviceType::kCUDA), "libcctune_cuda.so");
  EXPECT_STREQ(BackendLibraryName(DeviceType::kCPU), "");
  const std::vector<std::string> where = BackendLibraryCandidates(DeviceType::kCUDA);
  ASSERT_GE(where.size(), 3u);
  EXPECT_THAT(where[0], HasSubstr("/libcctune_cuda.so"));
  EXPECT_THAT(where[1], HasSubstr("/../lib/libcctune_cuda.so"));
  EXPECT_THAT(where[2], HasSubstr(".runfiles/cctune/kernels/cuda/libcctune_cuda.so"));
  EXPECT_TRUE(BackendLibraryCandidates(DeviceType::kCPU).empty());
  ::setenv("CCTUNE_CUDA_LIBRARY", "/opt/x/libcctune_cuda.so", 1);
  EXPECT_THAT(BackendLibraryCandidates(DeviceType::kCUDA),
              ElementsAre("/opt/x/libcctune_cuda.so"));
  ::unsetenv("CCTUNE_CUDA_LIBRARY");
}

// This binary links no CUDA backend, so asking for cuda opens the library: a file that is no
// shared object gives an error naming the library, the path and dlerror()'s reason, and the
// device is reported unavailable rather than crashing.
TEST(BackendLibraryTest, AnUnloadableLibraryIsAClearError) {
  const std::string path = TempPath("libcctune_cuda.so");
  std::ofstream out(path);
  for (int i = 0; i < 8; ++i) out << "this is not an ELF shared object, only text to reject\n";
  out.close();
  ::setenv("CCTUNE_CUDA_LIBRARY", path.c_str(), 1);
  absl::StatusOr<DeviceInterface*> iface = GetDeviceInterface(DeviceType::kCUDA);
  ASSERT_FALSE(iface.ok());
  EXPECT_EQ(iface.status().code(), absl::StatusCode::kUnavailable);
  const std::string msg(iface.status().message());
  EXPECT_THAT(msg, HasSubstr("libcctune_cuda.so"));
  EXPECT_THAT(msg, HasSubstr(path + " ("));
  EXPECT_THAT(msg, HasSubstr("invalid ELF header"));  // dlerror()
  EXPECT_THAT(msg, HasSubstr("CCTUNE_CUDA_LIBRARY"));
  EXPECT_FALSE(DeviceAvailable(Device::Cuda(0)));
  // Tried once per process: the same answer again, without another dlopen.
  EXPECT_EQ(GetDeviceInterface(DeviceType::kCUDA).status(), iface.status());
  ::unsetenv("CCTUNE_CUDA_LIBRARY");
}

}  // namespace
}  // namespace cctune
