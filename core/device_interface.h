// Per-device-type memory services: allocation and raw copies. The CPU implementation lives in
// core; the CUDA backend registers its own when it is linked in (kernels/cuda). Tensor uses
// these for allocation, device transfers and copies, so core never depends on CUDA.
#ifndef CCTUNE_CORE_DEVICE_INTERFACE_H_
#define CCTUNE_CORE_DEVICE_INTERFACE_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/device.h"
#include "core/strided.h"

namespace cctune {

class DeviceInterface {
 public:
  virtual ~DeviceInterface() = default;
  virtual DeviceType type() const = 0;
  virtual absl::StatusOr<int> DeviceCount() const = 0;
  virtual absl::StatusOr<void*> Allocate(int index, size_t bytes) = 0;
  virtual void Free(int index, void* ptr, size_t bytes) = 0;
  // Contiguous byte copies. `dst`/`src` live on this device type (index given).
  virtual absl::Status CopyToHost(void* host_dst, const void* src, size_t bytes, int index) = 0;
  virtual absl::Status CopyFromHost(void* dst, const void* host_src, size_t bytes,
                                    int index) = 0;
  virtual absl::Status CopyWithin(void* dst, const void* src, size_t bytes, int index) = 0;
  // dst[i] = cast(src[i]) over equal shapes, both on device `index` of this type.
  virtual absl::Status StridedCopy(const StridedView& dst, const StridedView& src,
                                   int index) = 0;
  virtual absl::Status Synchronize(int index) = 0;
};

// Registration is done once at static-init time by each backend.
void RegisterDeviceInterface(DeviceInterface* iface);
// The interface for a device type, or an error that names the device when its backend was not
// compiled in (e.g. "cuda:0 is not available: cctune was built without CUDA").
absl::StatusOr<DeviceInterface*> GetDeviceInterface(DeviceType type);
// Whether `device` can be used now (backend linked in and the index exists).
bool DeviceAvailable(const Device& device);

// Byte accounting per device: every Storage allocation and free goes through here. The
// recipes' "Memory used" figure is peak_bytes.
struct MemoryStats {
  int64_t current_bytes = 0;
  int64_t peak_bytes = 0;
  int64_t num_allocations = 0;  // live allocations
  // Allocations made since the process started (never decreases): a loop that allocates
  // nothing leaves it unchanged.
  int64_t total_allocations = 0;
};
MemoryStats GetMemoryStats(const Device& device);
void ResetPeakMemory(const Device& device);

namespace internal {
void RecordAllocation(const Device& device, int64_t bytes);
void RecordFree(const Device& device, int64_t bytes);
}  // namespace internal

}  // namespace cctune

#endif  // CCTUNE_CORE_DEVICE_INTERFACE_H_
