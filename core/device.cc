#include "core/device.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace cctune {

std::string Device::ToString() const {
  switch (type) {
    case DeviceType::kCPU:
      return "cpu";
    case DeviceType::kCUDA:
      return absl::StrCat("cuda:", index);
    case DeviceType::kMeta:
      return "meta";
  }
  return "?";
}

absl::StatusOr<Device> ParseDevice(absl::string_view name) {
  if (name == "cpu") return Device::Cpu();
  if (name == "meta") return Device::Meta();
  if (name == "cuda") return Device::Cuda(0);
  if (absl::StartsWith(name, "cuda:")) {
    int index;
    if (absl::SimpleAtoi(name.substr(5), &index) && index >= 0) return Device::Cuda(index);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown device '", name, "' (accepted: cpu, cuda, cuda:N, meta)"));
}

}  // namespace cctune
