// Memory-maps a whole file as CPU Storage, for zero-copy checkpoint loading. The mapping is
// private and writable (copy-on-write): tensors viewing it may be updated in place without
// ever changing the file. It is unmapped when the last tensor lets go of the Storage, and it is
// a Storage::WrapFileMapping, whose ReleasePages drops pages a loader has finished reading.
#ifndef CCTUNE_CHECKPOINT_MAPPED_FILE_H_
#define CCTUNE_CHECKPOINT_MAPPED_FILE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/storage.h"

namespace cctune {

// The whole of `path` as Storage (an empty file gives a 0-byte Storage with no data).
// NotFound / PermissionDenied / InvalidArgument (not a regular file) name the path.
// Note: shrinking the file while it is mapped makes later reads fault (SIGBUS), as with any
// mmap-based loader.
absl::StatusOr<std::shared_ptr<Storage>> MapFile(const std::string& path);

}  // namespace cctune

#endif  // CCTUNE_CHECKPOINT_MAPPED_FILE_H_
