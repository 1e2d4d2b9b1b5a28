#include "recipes/config_checks.h"

#include "absl/strings/str_cat.h"
#include "core/device_interface.h"
#include "core/log.h"
#include "core/status.h"

namespace cctune {

absl::Status AtLeastOne(const ConfigNode& node) {
  if (node.kind() == ConfigNode::Kind::kInt && node.int_value() < 1) {
    return absl::InvalidArgumentError(absl::StrCat("must be >= 1, got ", node.int_value()));
  }
  return absl::OkStatus();
}

absl::Status LogLevelKey(const ConfigNode& node) {
  if (node.kind() != ConfigNode::Kind::kString) return absl::OkStatus();
  return ParseLogLevel(node.string_value()).status();
}

absl::Status TrainingDeviceName(const ConfigNode& node) {
  if (node.kind() != ConfigNode::Kind::kString) return absl::OkStatus();
  absl::StatusOr<Device> d = ParseDevice(node.string_value());
  if (!d.ok()) return d.status();
  if (d->is_meta()) {
    return absl::InvalidArgumentError(
        absl::StrCat("device '", node.string_value(), "': training cannot run on meta"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Device> TrainingDevice(const std::string& name) {
  absl::StatusOr<Device> device = ParseDevice(name);
  if (!device.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("device: ", device.status().message()));
  }
  if (device->is_meta()) {
    return absl::InvalidArgumentError(
        absl::StrCat("device '", name, "': training cannot run on meta"));
  }
  if (device->is_cpu()) return *device;
  // Why the device cannot be used: the backend is not linked in, the driver reports an error,
  // or the index is out of range.
  auto unavailable = [&](absl::string_view reason) {
    return absl::FailedPreconditionError(
        absl::StrCat("device '", name, "': no CUDA device available: ", reason));
  };
  absl::StatusOr<DeviceInterface*> iface = GetDeviceInterface(device->type);
  if (!iface.ok()) return unavailable(iface.status().message());
  absl::StatusOr<int> count = (*iface)->DeviceCount();
  if (!count.ok()) return unavailable(count.status().message());
  if (*count < 1) return unavailable("the driver reports 0 devices");
  if (device->index >= *count) {
    return unavailable(absl::StrCat("index ", device->index, " but only ", *count,
                                    " device(s) (cuda:0 to cuda:", *count - 1, ")"));
  }
  return *device;
}

absl::StatusOr<DType> RecipeDType(const std::string& name) {
  if (name == "fp32") return DType::kF32;
  if (name == "bf16") return DType::kBF16;
  return absl::InvalidArgumentError(absl::StrCat("dtype '", name, "': expected fp32 or bf16"));
}

}  // namespace cctune
