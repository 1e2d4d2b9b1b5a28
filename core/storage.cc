#include "core/storage.h"

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
