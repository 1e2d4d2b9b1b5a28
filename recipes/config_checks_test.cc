// The training recipes' device checks: names parse (cpu, cuda, cuda:N), meta and unknown names
// are refused naming the value, and a CUDA device that cannot be used is refused with the key,
// the value and the reason.
#include "recipes/config_checks.h"

#include <string>

#include "config/node.h"
#include "core/device_interface.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

TEST(TrainingDeviceNameTest, AcceptsCpuAndCudaSyntaxAnywhere) {
  for (const char* name : {"cpu", "cuda", "cuda:0", "cuda:3"}) {
    EXPECT_TRUE(TrainingDeviceName(ConfigNode::String(name)).ok()) << name;
  }
  for (const char* name : {"meta", "gpu", "cuda:x", ""}) {
    EXPECT_FALSE(TrainingDeviceName(ConfigNode::String(name)).ok()) << name;
  }
}

TEST(TrainingDeviceTest, CpuIsAlwaysAvailable) {
  absl::StatusOr<Device> d = TrainingDevice("cpu");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->is_cpu());
}

TEST(TrainingDeviceTest, BadNamesNameTheValue) {
  absl::StatusOr<Device> d = TrainingDevice("gpu");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("device 'gpu'"), std::string::npos) << d.status();
  d = TrainingDevice("meta");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("device 'meta': training cannot run on meta"),
            std::string::npos)
      << d.status();
}

TEST(TrainingDeviceTest, UnusableCudaSaysWhy) {
  // cuda:99 is out of range on any machine (or the backend/driver is missing here).
  absl::StatusOr<Device> d = TrainingDevice("cuda:99");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(d.status().message().find("device 'cuda:99': no CUDA device available: "),
            std::string::npos)
      << d.status();
  // "cuda" works exactly when cuda:0 exists.
  d = TrainingDevice("cuda");
  EXPECT_EQ(d.ok(), DeviceAvailable(Device::Cuda(0))) << d.status();
  if (!d.ok()) {
    EXPECT_NE(d.status().message().find("device 'cuda': no CUDA device available: "),
              std::string::npos)
        << d.status();
  }
}

}  // namespace
}  // namespace cctune
