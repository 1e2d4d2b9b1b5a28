// Where a tensor lives: the CPU, CUDA device n, or "meta" (shape and dtype only, no memory;
// used to build a 405B model for inspection without allocating its weights).
#ifndef CCTUNE_CORE_DEVICE_H_
#define CCTUNE_CORE_DEVICE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cctune {

enum class DeviceType : int { kCPU = 0, kCUDA = 1, kMeta = 2 };
constexpr int kNumDeviceTypes = 3;

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;

  static Device Cpu() { return {DeviceType::kCPU, 0}; }
  static Device Cuda(int index = 0) { return {DeviceType::kCUDA, index}; }
  static Device Meta() { return {DeviceType::kMeta, 0}; }

  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  bool is_meta() const { return type == DeviceType::kMeta; }
  std::string ToString() const;  // "cpu", "cuda:0", "meta"

  friend bool operator==(const Device& a, const Device& b) {
    return a.type == b.type && a.index == b.index;
  }
  friend bool operator!=(const Device& a, const Device& b) { return !(a == b); }
};

// "cpu", "cuda", "cuda:N", "meta".
absl::StatusOr<Device> ParseDevice(absl::string_view name);

}  // namespace cctune

#endif  // CCTUNE_CORE_DEVICE_H_
