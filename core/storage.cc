#include "core/storage.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

#include "core/device_interface.h"
#include "core/status.h"

namespace cctune {

absl::StatusOr<std::shared_ptr<Storage>> Storage::Allocate(const Device& device,
                                                           size_t bytes) {
  CCTUNE_ASSIGN_OR_RETURN(DeviceInterface * iface, GetDeviceInterface(device.type));
  CCTUNE_ASSIGN_OR_RETURN(void* p, iface->Allocate(device.index, bytes));
  internal::RecordAllocation(device, static_cast<int64_t>(bytes));
  return std::shared_ptr<Storage>(new Storage(p, bytes, device, /*owned=*/true, nullptr));
}

std::shared_ptr<Storage> Storage::Wrap(void* data, size_t bytes, const Device& device,
                                       std::function<void()> release) {
  return std::shared_ptr<Storage>(
      new Storage(data, bytes, device, /*owned=*/false, std::move(release)));
}

std::shared_ptr<Storage> Storage::WrapFileMapping(void* data, size_t bytes,
                                                  std::function<void()> release) {
  return std::shared_ptr<Storage>(new Storage(data, bytes, Device::Cpu(), /*owned=*/false,
                                              std::move(release), /*file_mapped=*/true));
}

void Storage::ReleasePages(size_t offset, size_t bytes) const {
  if (!file_mapped_ || data_ == nullptr || offset >= bytes_) return;
  bytes = std::min(bytes, bytes_ - offset);
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data_) + offset;
  const uintptr_t first = (begin + page - 1) / page * page;  // whole pages only
  const uintptr_t last = (begin + bytes) / page * page;
  if (last <= first) return;
  // Advisory: a failure leaves the pages resident, which is only a missed saving.
  ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

bool Storage::PopulatePages(size_t offset, size_t bytes) const {
  if (!file_mapped_ || data_ == nullptr || offset >= bytes_) return false;
#ifdef MADV_POPULATE_READ
  bytes = std::min(bytes, bytes_ - offset);
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data_) + offset;
  const uintptr_t first = begin / page * page;
  const uintptr_t last = (begin + bytes + page - 1) / page * page;
  // Huge-page advice first: the part of the file not yet in the page cache is then read in
  // 2 MiB folios, which the kernel maps with 2 MiB pages (decode's TLB misses; advisory).
  ::madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
  return ::madvise(reinterpret_cast<void*>(first), last - first, MADV_POPULATE_READ) == 0;
#else
  (void)bytes;
  return false;
#endif
}

bool Storage::AdviseHugePages() const {
  if (!owned_ || !device_.is_cpu() || data_ == nullptr) return false;
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data_);
  const uintptr_t first = (begin + kHuge - 1) / kHuge * kHuge;
  const uintptr_t last = (begin + bytes_) / kHuge * kHuge;
  if (last <= first) return false;
  return ::madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE) == 0;
}

Storage::~Storage() {
  if (owned_) {
    auto iface = GetDeviceInterface(device_.type);
    CCTUNE_CHECK(iface.ok(), "device interface vanished for ", device_.ToString());
    (*iface)->Free(device_.index, data_, bytes_);
    internal::RecordFree(device_, static_cast<int64_t>(bytes_));
  } else if (release_) {
    release_();
  }
}

}  // namespace cctune
