// TFRecord files, the container of TensorBoard event files. Each record is
//   uint64 length (little-endian) | uint32 masked CRC32C of those 8 bytes |
//   `length` bytes of data        | uint32 masked CRC32C of the data
// The writer appends to a file it owns; the reader checks both CRCs of every record, and its
// errors name the file, the record index and the byte offset.
#ifndef CCTUNE_TRAINING_TFRECORD_H_
#define CCTUNE_TRAINING_TFRECORD_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cctune {

// The framed bytes of one record (header, data, footer).
std::string FrameTFRecord(std::string_view data);

class TFRecordWriter {
 public:
  // Creates `path` (truncating), or appends to it when `append` is true.
  static absl::StatusOr<std::unique_ptr<TFRecordWriter>> Open(const std::string& path,
                                                              bool append = false);
  ~TFRecordWriter();
  TFRecordWriter(const TFRecordWriter&) = delete;
  TFRecordWriter& operator=(const TFRecordWriter&) = delete;

  absl::Status Write(std::string_view data);
  // Pushes buffered records to the OS (fflush), so readers see them.
  absl::Status Flush();
  // Flushes and closes; further writes fail. Called by the destructor when needed.
  absl::Status Close();

  const std::string& path() const { return path_; }

 private:
  TFRecordWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  std::string path_;
  std::FILE* file_;
};

// Splits a whole file image into records, validating lengths and both CRCs.
// `file` only names the source in errors.
absl::StatusOr<std::vector<std::string>> ParseTFRecords(std::string_view bytes,
                                                        std::string_view file = "<memory>");
// Reads and parses `path`.
absl::StatusOr<std::vector<std::string>> ReadTFRecordFile(const std::string& path);

}  // namespace cctune

#endif  // CCTUNE_TRAINING_TFRECORD_H_
