#include "core/device_interface.h"

#include "core/backend_library.h"
#include "core/status.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"

namespace cctune {
namespace {

constexpr int kMaxDevicesPerType = 16;
constexpr size_t kCpuAlignment = 64;

struct Counters {
  std::atomic<int64_t> current{0};
  std::atomic<int64_t> peak{0};
  std::atomic<int64_t> count{0};
  std::atomic<int64_t> total{0};
};

Counters& CountersFor(const Device& d) {
  static Counters counters[kNumDeviceTypes][kMaxDevicesPerType];
  const int idx = std::min(std::max(d.index, 0), kMaxDevicesPerType - 1);
  return counters[static_cast<int>(d.type)][idx];
}

class CpuDeviceInterface final : public DeviceInterface {
 public:
  DeviceType type() const override { return DeviceType::kCPU; }
  absl::StatusOr<int> DeviceCount() const override { return 1; }
  absl::StatusOr<void*> Allocate(int, size_t bytes) override {
    const size_t rounded = (std::max<size_t>(bytes, 1) + kCpuAlignment - 1) / kCpuAlignment *
                           kCpuAlignment;
    void* p = std::aligned_alloc(kCpuAlignment, rounded);
    if (p == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cpu: out of memory allocating ", bytes, " bytes"));
    }
    return p;
  }
  void Free(int, void* ptr, size_t) override { std::free(ptr); }
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes, int) override {
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status CopyFromHost(void* dst, const void* src, size_t bytes, int) override {
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status CopyWithin(void* dst, const void* src, size_t bytes, int) override {
    std::memmove(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status StridedCopy(const StridedView& dst, const StridedView& src, int) override {
    StridedCopyCpu(dst, src);
    return absl::OkStatus();
  }
  absl::Status Synchronize(int) override { return absl::OkStatus(); }
};

std::atomic<DeviceInterface*>& Slot(DeviceType t) {
  static std::atomic<DeviceInterface*> slots[kNumDeviceTypes];
  return slots[static_cast<int>(t)];
}

DeviceInterface* CpuInterface() {
  static CpuDeviceInterface* cpu = new CpuDeviceInterface();
  return cpu;
}

}  // namespace

void RegisterDeviceInterface(DeviceInterface* iface) { Slot(iface->type()).store(iface); }

absl::StatusOr<DeviceInterface*> GetDeviceInterface(DeviceType type) {
  if (type == DeviceType::kCPU) return CpuInterface();
  if (type == DeviceType::kMeta) {
    return absl::FailedPreconditionError(
        "meta tensors have no memory: materialise the model on cpu or cuda first");
  }
  DeviceInterface* iface = Slot(type).load();
  if (iface != nullptr) return iface;
  // Not linked in (a CPU binary): open the backend library, whose static initialiser
  // registers the interface (core/backend_library.h).
  CCTUNE_RETURN_IF_ERROR(LoadBackendLibrary(type));
  iface = Slot(type).load();
  if (iface == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "cuda is not available: ", BackendLibraryName(type),
        " was loaded but registered no CUDA backend (it was built without the CUDA toolkit: "
        "none found at $CUDA_PATH or /usr/local/cuda when Bazel configured @local_cuda)"));
  }
  return iface;
}

bool DeviceAvailable(const Device& device) {
  auto iface = GetDeviceInterface(device.type);
  if (!iface.ok()) return false;
  auto n = (*iface)->DeviceCount();
  return n.ok() && device.index < *n;
}

MemoryStats GetMemoryStats(const Device& device) {
  Counters& c = CountersFor(device);
  MemoryStats s;
  s.current_bytes = c.current.load();
  s.peak_bytes = c.peak.load();
  s.num_allocations = c.count.load();
  s.total_allocations = c.total.load();
  return s;
}

void ResetPeakMemory(const Device& device) {
  Counters& c = CountersFor(device);
  c.peak.store(c.current.load());
}

namespace internal {
void RecordAllocation(const Device& device, int64_t bytes) {
  Counters& c = CountersFor(device);
  const int64_t now = c.current.fetch_add(bytes) + bytes;
  c.count.fetch_add(1);
  c.total.fetch_add(1);
  int64_t peak = c.peak.load();
  while (now > peak && !c.peak.compare_exchange_weak(peak, now)) {
  }
}
void RecordFree(const Device& device, int64_t bytes) {
  Counters& c = CountersFor(device);
  c.current.fetch_sub(bytes);
  c.count.fetch_sub(1);
}
}  // namespace internal

}  // namespace cctune
