#include "kernels/backend.h"

#include <atomic>

#include "absl/strings/str_cat.h"
#include "core/device_interface.h"
#include "core/status.h"
#include "kernels/cpu/cpu_backend.h"

namespace cctune {
namespace {

std::atomic<OpBackend*>& Slot(DeviceType t) {
  static std::atomic<OpBackend*> slots[kNumDeviceTypes];
  return slots[static_cast<int>(t)];
}

const char* TypeName(DeviceType t) {
  switch (t) {
    case DeviceType::kCPU:
      return "cpu";
    case DeviceType::kCUDA:
      return "cuda";
    case DeviceType::kMeta:
      return "meta";
  }
  return "?";
}

}  // namespace

void RegisterOpBackend(OpBackend* backend) {
  CCTUNE_CHECK(backend != nullptr, "RegisterOpBackend(nullptr)");
  // The CPU backend is built in and handed out by GetOpBackend directly.
  CCTUNE_CHECK(backend->type() != DeviceType::kCPU, "RegisterOpBackend: cpu is built in");
  Slot(backend->type()).store(backend);
}

absl::StatusOr<OpBackend*> GetOpBackend(DeviceType type) {
  if (type == DeviceType::kCPU) return cpu::CpuOpBackend();
  if (type == DeviceType::kMeta) {
    return absl::FailedPreconditionError(
        "no op backend for meta tensors: they have no data to compute on");
  }
  OpBackend* backend = Slot(type).load();
  if (backend == nullptr) {
    // A CPU binary opens the backend library on first use; it registers both interfaces.
    CCTUNE_RETURN_IF_ERROR(GetDeviceInterface(type).status());
    backend = Slot(type).load();
  }
  if (backend == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "no op backend for ", TypeName(type),
        ": cctune was built without it (the CUDA toolkit was not found, or //kernels/cuda is "
        "not linked in)"));
  }
  return backend;
}

}  // namespace cctune
