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
  // Wraps a private (copy-on-write) mapping of a file (checkpoint/mapped_file): as Wrap, and
  // ReleasePages may hand its pages back to the kernel, since they re-read from the file.
  static std::shared_ptr<Storage> WrapFileMapping(void* data, size_t bytes,
                                                  std::function<void()> release);

  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  const Device& device() const { return device_; }
  bool owned() const { return owned_; }
  bool file_mapped() const { return file_mapped_; }

  // For file mappings: drops the whole pages inside [offset, offset + bytes) from this
  // process's resident set (madvise MADV_DONTNEED). The data stays readable: a later read
  // faults it back in from the page cache or the file (so bytes changed in place through the
  // copy-on-write mapping revert to the file's). A no-op for every other storage (where
  // dropping pages would lose data). Loaders call it once a tensor has been converted, so that
  // the peak RSS of a converting load is one copy of the weights plus the tensor in flight.
  void ReleasePages(size_t offset, size_t bytes) const;
  // For file mappings: maps the pages of [offset, offset + bytes) into this process now
  // (madvise MADV_POPULATE_READ: read faults from the page cache, reading the file where it is
  // not cached; no copy-on-write copies), so that the first pass over viewed weights takes no
  // page faults (about 35,000 for 2.2 GB, 0.2-0.4 s of system time inside the first forward).
  // The range is advised MADV_HUGEPAGE first, so that what is not cached yet is read in 2 MiB
  // folios, which the kernel then maps with 2 MiB pages (docs/generation.md, "Memory and load
  // time").
  // Returns false, changing nothing, where the kernel lacks it (before Linux 5.14) or for other
  // storage.
  bool PopulatePages(size_t offset, size_t bytes) const;
  // For owned CPU storage: asks for transparent huge pages (madvise MADV_HUGEPAGE) on the
  // whole 2 MiB pages inside the block, before they are first written. Decode streams every
  // weight once per token, and with 4 KiB pages the TLB misses cost about 12% of it (measured:
  // docs/generation.md, "Memory and load time"). Advisory, like ReleasePages: returns whether
  // the kernel took the advice (false under transparent_hugepage=never, on other devices, or
  // for blocks under 2 MiB).
  bool AdviseHugePages() const;

 private:
  Storage(void* data, size_t bytes, const Device& device, bool owned,
          std::function<void()> release, bool file_mapped = false)
      : data_(data),
        bytes_(bytes),
        device_(device),
        owned_(owned),
        file_mapped_(file_mapped),
        release_(std::move(release)) {}

  void* data_;
  size_t bytes_;
  Device device_;
  bool owned_;
  bool file_mapped_;
  std::function<void()> release_;
};

}  // namespace cctune

#endif  // CCTUNE_CORE_STORAGE_H_
