// The CUDA DeviceInterface (core/device_interface.h): device memory through a caching
// allocator, host <-> device copies and strided casts, registered for DeviceType::kCUDA at
// static-init time (without any CUDA call; the runtime starts on first use).
//
// Streams: every copy and kernel of cctune runs on the legacy default stream, so work is
// ordered, and a freed block can be handed to the next allocation without synchronising.
// Copies to and from pageable host memory (cudaMemcpy) block the host until done.
#ifndef CCTUNE_KERNELS_CUDA_CUDA_DEVICE_H_
#define CCTUNE_KERNELS_CUDA_CUDA_DEVICE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/strided.h"
#include "kernels/cuda/kernels.h"

namespace cctune {
namespace cuda {

// Number of CUDA devices, or Unavailable naming cudaGetDeviceCount's error (no driver, no
// device). Computed once.
absl::StatusOr<int> DeviceCount();

// Makes device `index` current for the calling thread; InvalidArgument when it does not exist.
absl::Status UseDevice(int index);

// Multiprocessor count of device `index` (cached).
absl::StatusOr<int> MultiprocessorCount(int index);

// The caching allocator's view of device `index`: bytes obtained from cudaMalloc, and the
// part of them that is free and waiting for reuse.
struct AllocatorStats {
  int64_t reserved_bytes = 0;
  int64_t cached_bytes = 0;
};
AllocatorStats GetAllocatorStats(int index);

// Returns every cached (free) block of device `index` to the driver.
absl::Status EmptyCache(int index);

// The kernels' view (kernels.h) of a strided view: same pointer, dtype code, shape, strides.
CuTensor ToCu(const StridedView& v);

}  // namespace cuda
}  // namespace cctune

#endif  // CCTUNE_KERNELS_CUDA_CUDA_DEVICE_H_
