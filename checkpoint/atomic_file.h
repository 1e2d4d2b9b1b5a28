// Atomic file writes for checkpoints: data goes to a temporary file in the destination's
// directory, which is fsync'd, renamed over the destination and followed by an fsync of the
// directory. A crash leaves either the old file or the complete new one, never a torn file.
#ifndef CCTUNE_CHECKPOINT_ATOMIC_FILE_H_
#define CCTUNE_CHECKPOINT_ATOMIC_FILE_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cctune {

class AtomicFileWriter {
 public:
  // Creates the temporary file beside `path` (the directory must exist).
  static absl::StatusOr<std::unique_ptr<AtomicFileWriter>> Create(const std::string& path);

  // Removes the temporary file unless Commit() succeeded.
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  absl::Status Append(const void* data, size_t bytes);
  absl::Status Append(absl::string_view data) { return Append(data.data(), data.size()); }
  // fsync, close, rename onto the destination, fsync the directory. Call once.
  absl::Status Commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }
  size_t bytes_written() const { return bytes_written_; }

 private:
  AtomicFileWriter(std::string path, std::string temp_path, int fd)
      : path_(std::move(path)), temp_path_(std::move(temp_path)), fd_(fd) {}

  std::string path_;
  std::string temp_path_;
  int fd_;
  size_t bytes_written_ = 0;
  bool committed_ = false;
};

// Whether `filename` (a name without its directory) is the temporary file of an atomic write,
// ".<name>.tmp.<pid>.<n>": one a killed process left behind, when no write is in flight.
bool IsAtomicWriteTemporary(absl::string_view filename);

// Writes `contents` to `path` atomically.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents);

// Reads a whole (small) file, e.g. a JSON config; NotFound when it does not exist.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

}  // namespace cctune

#endif  // CCTUNE_CHECKPOINT_ATOMIC_FILE_H_
