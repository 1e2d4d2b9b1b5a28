#include "kernels/cuda/cuda_device.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "core/device_interface.h"
#include "core/status.h"
#include "core/strided.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/kernels.h"

namespace cctune {
namespace cuda {
namespace {

constexpr int kMaxDevices = 16;
constexpr size_t kSmallLimit = size_t{1} << 20;  // below: 512-byte granularity
constexpr size_t kSmallRound = 512;
constexpr size_t kLargeRound = size_t{128} << 10;

size_t RoundSize(size_t bytes) {
  bytes = std::max<size_t>(bytes, 1);
  const size_t g = bytes < kSmallLimit ? kSmallRound : kLargeRound;
  return (bytes + g - 1) / g * g;
}

// Keeps freed blocks per device for reuse; blocks go back to the driver only in EmptyCache or
// when cudaMalloc runs out of memory. Never destroyed (tensors may outlive static teardown).
class CachingAllocator {
 public:
  absl::StatusOr<void*> Allocate(int index, size_t bytes) {
    const size_t want = RoundSize(bytes);
    PerDevice& dev = devices_[index];
    {
      std::lock_guard<std::mutex> lock(dev.mu);
      // Reuse the smallest cached block that fits without wasting more than a quarter.
      auto it = dev.free_blocks.lower_bound(want);
      if (it != dev.free_blocks.end() && it->first <= want + want / 4) {
        void* p = it->second;
        dev.live[p] = it->first;
        dev.cached -= static_cast<int64_t>(it->first);
        dev.free_blocks.erase(it);
        return p;
      }
    }
    CCTUNE_RETURN_IF_ERROR(UseDevice(index));
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, want);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      CCTUNE_RETURN_IF_ERROR(EmptyCache(index));
      err = cudaMalloc(&p, want);
    }
    if (err != cudaSuccess) {
      const absl::Status s = CudaErrorStatus(err, "cudaMalloc(&p, bytes)");
      return absl::Status(
          s.code(), absl::StrCat("cuda:", index, ": allocating ", bytes, " bytes (",
                                 ReservedBytes(index), " reserved by cctune): ", s.message()));
    }
    std::lock_guard<std::mutex> lock(dev.mu);
    dev.live[p] = want;
    dev.reserved += static_cast<int64_t>(want);
    return p;
  }

  void Free(int index, void* p) {
    if (p == nullptr) return;
    PerDevice& dev = devices_[index];
    std::lock_guard<std::mutex> lock(dev.mu);
    auto it = dev.live.find(p);
    CCTUNE_CHECK(it != dev.live.end(), "cuda:", index,
                 ": freeing a pointer this allocator "
                 "did not hand out");
    dev.free_blocks.emplace(it->second, p);
    dev.cached += static_cast<int64_t>(it->second);
    dev.live.erase(it);
  }

  absl::Status EmptyCache(int index) {
    PerDevice& dev = devices_[index];
    std::multimap<size_t, void*> blocks;
    {
      std::lock_guard<std::mutex> lock(dev.mu);
      blocks.swap(dev.free_blocks);
      dev.cached = 0;
      for (const auto& b : blocks) dev.reserved -= static_cast<int64_t>(b.first);
    }
    if (blocks.empty()) return absl::OkStatus();
    CCTUNE_RETURN_IF_ERROR(UseDevice(index));
    for (const auto& b : blocks) CCTUNE_CUDA_RETURN_IF_ERROR(cudaFree(b.second));
    return absl::OkStatus();
  }

  AllocatorStats Stats(int index) {
    PerDevice& dev = devices_[index];
    std::lock_guard<std::mutex> lock(dev.mu);
    return AllocatorStats{dev.reserved, dev.cached};
  }

 private:
  struct PerDevice {
    std::mutex mu;
    std::multimap<size_t, void*> free_blocks;  // size -> block
    std::unordered_map<void*, size_t> live;    // block -> size
    int64_t reserved = 0;
    int64_t cached = 0;
  };

  int64_t ReservedBytes(int index) { return Stats(index).reserved_bytes; }

  PerDevice devices_[kMaxDevices];
};

CachingAllocator& Allocator() {
  static CachingAllocator* a = new CachingAllocator();
  return *a;
}


absl::Status CheckIndex(int index) {
  CCTUNE_ASSIGN_OR_RETURN(const int n, DeviceCount());
  if (index < 0 || index >= n || index >= kMaxDevices) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda:", index, " does not exist (", n, " CUDA devices)"));
  }
  return absl::OkStatus();
}

class CudaDeviceInterface final : public DeviceInterface {
 public:
  DeviceType type() const override { return DeviceType::kCUDA; }
  absl::StatusOr<int> DeviceCount() const override { return cuda::DeviceCount(); }

  absl::StatusOr<void*> Allocate(int index, size_t bytes) override {
    CCTUNE_RETURN_IF_ERROR(CheckIndex(index));
    return Allocator().Allocate(index, bytes);
  }

  void Free(int index, void* ptr, size_t) override { Allocator().Free(index, ptr); }

  absl::Status CopyToHost(void* host_dst, const void* src, size_t bytes, int index) override {
    if (bytes == 0) return absl::OkStatus();
    CCTUNE_RETURN_IF_ERROR(UseDevice(index));
    CCTUNE_CUDA_RETURN_IF_ERROR(cudaMemcpy(host_dst, src, bytes, cudaMemcpyDeviceToHost));
    return absl::OkStatus();
  }

  absl::Status CopyFromHost(void* dst, const void* host_src, size_t bytes, int index) override {
    if (bytes == 0) return absl::OkStatus();
    CCTUNE_RETURN_IF_ERROR(UseDevice(index));
    CCTUNE_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, host_src, bytes, cudaMemcpyHostToDevice));
    return absl::OkStatus();
  }

  // memmove semantics: overlapping ranges go through a scratch block.
  absl::Status CopyWithin(void* dst, const void* src, size_t bytes, int index) override {
    if (bytes == 0 || dst == src) return absl::OkStatus();
    CCTUNE_RETURN_IF_ERROR(UseDevice(index));
    const char* d = static_cast<const char*>(dst);
    const char* s = static_cast<const char*>(src);
    if (d < s + bytes && s < d + bytes) {
      CCTUNE_ASSIGN_OR_RETURN(void* tmp, Allocator().Allocate(index, bytes));
      absl::Status st =
          CudaErrorStatus(cudaMemcpyAsync(tmp, src, bytes, cudaMemcpyDeviceToDevice, nullptr),
                          "cudaMemcpyAsync(tmp, src, bytes, cudaMemcpyDeviceToDevice)");
      if (st.ok()) {
        st = CudaErrorStatus(cudaMemcpyAsync(dst, tmp, bytes, cudaMemcpyDeviceToDevice, nullptr),
                             "cudaMemcpyAsync(dst, tmp, bytes, cudaMemcpyDeviceToDevice)");
      }
      Allocator().Free(index, tmp);  // stream-ordered reuse is safe
      return st;
    }
    CCTUNE_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, nullptr));
    return absl::OkStatus();
  }

  absl::Status StridedCopy(const StridedView& dst, const StridedView& src, int index) override {
    CCTUNE_RETURN_IF_ERROR(UseDevice(index));
    CCTUNE_CUDA_RETURN_IF_ERROR(LaunchStridedCopy(ToCu(dst), ToCu(src), nullptr));
    return absl::OkStatus();
  }

  absl::Status Synchronize(int index) override {
    CCTUNE_RETURN_IF_ERROR(UseDevice(index));
    CCTUNE_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
    return absl::OkStatus();
  }
};

// Registration only: no CUDA call happens before the first use.
const bool kRegistered = [] {
  RegisterDeviceInterface(new CudaDeviceInterface());
  return true;
}();

}  // namespace

absl::StatusOr<int> DeviceCount() {
  static const absl::StatusOr<int>* const count = [] {
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      const absl::Status s = CudaErrorStatus(err, "cudaGetDeviceCount");
      return new absl::StatusOr<int>(absl::UnavailableError(s.message()));
    }
    return new absl::StatusOr<int>(n);
  }();
  return *count;
}

absl::Status UseDevice(int index) {
  int current = -1;
  CCTUNE_CUDA_RETURN_IF_ERROR(cudaGetDevice(&current));
  if (current == index) return absl::OkStatus();
  CCTUNE_RETURN_IF_ERROR(CheckIndex(index));
  CCTUNE_CUDA_RETURN_IF_ERROR(cudaSetDevice(index));
  return absl::OkStatus();
}

absl::StatusOr<int> MultiprocessorCount(int index) {
  CCTUNE_RETURN_IF_ERROR(CheckIndex(index));
  static std::mutex mu;
  static int cached[kMaxDevices] = {};
  std::lock_guard<std::mutex> lock(mu);
  if (cached[index] == 0) {
    int n = 0;
    CCTUNE_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, index));
    cached[index] = n;
  }
  return cached[index];
}

AllocatorStats GetAllocatorStats(int index) {
  if (index < 0 || index >= kMaxDevices) return {};
  return Allocator().Stats(index);
}

absl::Status EmptyCache(int index) {
  CCTUNE_RETURN_IF_ERROR(CheckIndex(index));
  return Allocator().EmptyCache(index);
}

CuTensor ToCu(const StridedView& v) {
  CuTensor c;
  c.data = v.data;
  c.dtype = static_cast<int>(v.dtype);
  c.ndim = v.ndim;
  for (int i = 0; i < v.ndim; ++i) {
    c.shape[i] = v.shape[i];
    c.strides[i] = v.strides[i];
  }
  return c;
}

}  // namespace cuda
}  // namespace cctune
