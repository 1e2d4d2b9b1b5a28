#include "training/tfrecord.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "training/crc32c.h"

namespace cctune {
namespace {

void PutLe32(uint32_t v, char* out) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xffu);
}
void PutLe64(uint64_t v, char* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xffu);
}
uint32_t GetLe32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
uint64_t GetLe64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

}  // namespace

std::string FrameTFRecord(std::string_view data) {
  std::string out(12 + data.size() + 4, '\0');
  PutLe64(data.size(), &out[0]);
  PutLe32(MaskCrc32c(Crc32c(out.data(), 8)), &out[8]);
  std::memcpy(&out[12], data.data(), data.size());
  PutLe32(MaskCrc32c(Crc32c(data)), &out[12 + data.size()]);
  return out;
}

absl::StatusOr<std::unique_ptr<TFRecordWriter>> TFRecordWriter::Open(const std::string& path,
                                                                     bool append) {
  std::FILE* f = std::fopen(path.c_str(), append ? "ab" : "wb");
  if (f == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot open TFRecord file '", path, "' for writing: ", std::strerror(errno)));
  }
  return std::unique_ptr<TFRecordWriter>(new TFRecordWriter(path, f));
}

TFRecordWriter::~TFRecordWriter() { Close().IgnoreError(); }

absl::Status TFRecordWriter::Write(std::string_view data) {
  if (file_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("TFRecord file '", path_, "' is closed"));
  }
  const std::string framed = FrameTFRecord(data);
  if (std::fwrite(framed.data(), 1, framed.size(), file_) != framed.size()) {
    return absl::DataLossError(
        absl::StrCat("writing a record to '", path_, "': ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status TFRecordWriter::Flush() {
  if (file_ == nullptr) return absl::OkStatus();
  if (std::fflush(file_) != 0) {
    return absl::DataLossError(absl::StrCat("flushing '", path_, "': ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status TFRecordWriter::Close() {
  if (file_ == nullptr) return absl::OkStatus();
  const int rc = std::fclose(file_);
  file_ = nullptr;
  if (rc != 0) {
    return absl::DataLossError(absl::StrCat("closing '", path_, "': ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ParseTFRecords(std::string_view bytes,
                                                        std::string_view file) {
  std::vector<std::string> records;
  size_t pos = 0;
  while (pos < bytes.size()) {
    const size_t index = records.size();
    auto where = [&] {
      return absl::StrCat(std::string(file), ": record ", index, " at byte offset ", pos);
    };
    if (bytes.size() - pos < 12) {
      return absl::DataLossError(
          absl::StrCat(where(), ": truncated header (", bytes.size() - pos, " of 12 bytes)"));
    }
    const char* p = bytes.data() + pos;
    const uint64_t length = GetLe64(p);
    const uint32_t length_crc = GetLe32(p + 8);
    const uint32_t expected_length_crc = MaskCrc32c(Crc32c(p, 8));
    if (length_crc != expected_length_crc) {
      return absl::DataLossError(
          absl::StrFormat("%s: length CRC mismatch (stored 0x%08x, computed 0x%08x)", where(),
                          length_crc, expected_length_crc));
    }
    if (length > bytes.size() - pos - 12 || bytes.size() - pos - 12 - length < 4) {
      return absl::DataLossError(absl::StrCat(where(), ": record of ", length,
                                              " bytes runs past the end of the file (",
                                              bytes.size(), " bytes)"));
    }
    std::string_view data(p + 12, length);
    const uint32_t data_crc = GetLe32(p + 12 + length);
    const uint32_t expected_data_crc = MaskCrc32c(Crc32c(data));
    if (data_crc != expected_data_crc) {
      return absl::DataLossError(
          absl::StrFormat("%s: data CRC mismatch (stored 0x%08x, computed 0x%08x)", where(),
                          data_crc, expected_data_crc));
    }
    records.emplace_back(data);
    pos += 12 + length + 4;
  }
  return records;
}

absl::StatusOr<std::vector<std::string>> ReadTFRecordFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open TFRecord file '", path, "'"));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ParseTFRecords(ss.str(), path);
}

}  // namespace cctune
