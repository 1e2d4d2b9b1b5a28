// A block of device memory shared by tensors (views share one Storage). Owned storage is
// allocated through the device interface and counted in the per-device memory stats; wrapped
// storage (e.g. an mmap'd checkpoint) carries its own release function and is not counted.
#ifndef CCTUNE_CORE_STORAGE_H_
#define CCTUNE_CORE_STORAGE_H_

#include <cstddef>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "core/device.h"

namespace cctune {

class Storage {
 public:
  // Allocates `bytes` on `device` (uninitialised).
  static absl::StatusOr<std::shared_ptr<Storage>> Allocate(const Device& device, size_t bytes);
  // Wraps memory owned elsewhere; `release` runs when the last tensor lets go.
  static std::shared_ptr<Storage> Wrap(void* data, size_t bytes, const Device& device,
                                       std::function<void()> release);

  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  const Device& device() const { return device_; }
  bool owned() const { return owned_; }

 private:
  Storage(void* data, size_t bytes, const Device& device, bool owned,
          std::function<void()> release)
      : data_(data), bytes_(bytes), device_(device), owned_(owned), release_(std::move(release)) {}

  void* data_;
  size_t bytes_;
  Device device_;
  bool owned_;
  std::function<void()> release_;
};

}  // namespace cctune

#endif  // CCTUNE_CORE_STORAGE_H_
