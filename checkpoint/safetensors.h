// Reading and writing the safetensors format (https://github.com/huggingface/safetensors):
//   [u64 little-endian N][N bytes of JSON header][data section]
// The header maps tensor names to {"dtype", "shape", "data_offsets": [begin, end]} (byte
// offsets into the data section) plus an optional "__metadata__" string map.
//
// Reading maps the file (MAP_PRIVATE, copy-on-write) and validates the whole header before
// any data is touched. Tensors come back as zero-copy views on the mapping (they keep it
// alive), or as converted copies. Writing is atomic (temporary file, fsync, rename).
#ifndef CCTUNE_CHECKPOINT_SAFETENSORS_H_
#define CCTUNE_CHECKPOINT_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "checkpoint/state_dict.h"
#include "core/dtype.h"
#include "core/storage.h"
#include "core/tensor.h"

namespace cctune {

// Largest header accepted (the limit the reference implementation uses).
constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

// "F32" <-> DType::kF32 etc. Known but unsupported names (F64, U8, F8_E4M3, ...) give
// Unimplemented naming the dtype; unknown names give InvalidArgument.
absl::StatusOr<DType> SafetensorsDTypeFromName(absl::string_view name);
const char* SafetensorsDTypeName(DType dtype);

struct SafetensorsEntry {
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t begin = 0;  // byte offsets into the data section
  uint64_t end = 0;
};

struct SafetensorsHeader {
  std::map<std::string, SafetensorsEntry> tensors;
  std::map<std::string, std::string> metadata;  // "__metadata__"
  uint64_t data_start = 0;  // file offset of the data section: 8 + header length
  uint64_t data_size = 0;   // bytes in the data section
};

// Parses and validates a whole file image: the length prefix, the JSON header, every entry
// against the data section that follows. `file` only names the source in error messages.
// Never aborts on bad input; this is what the fuzzer drives.
absl::StatusOr<SafetensorsHeader> ParseSafetensors(absl::string_view file_bytes,
                                                   absl::string_view file = "<memory>");

// Parses only the JSON header, validating entries against `data_size` bytes of data.
absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(absl::string_view json,
                                                         uint64_t data_size,
                                                         absl::string_view file = "<memory>");

class SafetensorsFile {
 public:
  // Maps and validates `path`. Errors name the file and, where one is at fault, the tensor.
  static absl::StatusOr<SafetensorsFile> Open(const std::string& path);

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  const std::map<std::string, SafetensorsEntry>& entries() const { return header_.tensors; }
  const SafetensorsHeader& header() const { return header_; }
  std::vector<std::string> Names() const;  // sorted
  bool Contains(const std::string& name) const { return header_.tensors.count(name) > 0; }
  absl::StatusOr<SafetensorsEntry> Entry(const std::string& name) const;

  // A CPU view on the mapping, in the file's dtype. If the tensor's bytes are misaligned
  // for its dtype the result is an aligned copy instead. Writes to a view change only this
  // process's private pages, never the file.
  absl::StatusOr<Tensor> Load(const std::string& name) const;
  // A contiguous CPU copy converted to `target`, or the view when the dtype already matches.
  absl::StatusOr<Tensor> Load(const std::string& name, DType target) const;
  // Reads the tensor into existing memory (e.g. a model parameter), converting to dst's dtype;
  // shapes must match. dst may be strided or on another device. Avoids a second allocation.
  absl::Status LoadInto(const std::string& name, Tensor& dst) const;
  // Every tensor, as Load(name) / Load(name, target).
  absl::StatusOr<StateDict> LoadAll() const;
  absl::StatusOr<StateDict> LoadAll(DType target) const;

  // The whole mapping (all views share it); exposed for tests and benchmarks.
  const std::shared_ptr<Storage>& mapping() const { return mapping_; }

 private:
  std::string path_;
  SafetensorsHeader header_;
  std::shared_ptr<Storage> mapping_;
};

// Serialises tensors (any supported dtype, any device, any strides; copied to the host as
// needed) and string metadata. Header keys are sorted, data is laid out by descending dtype
// size then name (so every tensor is aligned), and the header is padded with spaces to a
// multiple of 8 bytes. Meta or undefined tensors and the name "__metadata__" are rejected.
absl::Status SaveSafetensors(const std::string& path, const StateDict& tensors,
                             const std::map<std::string, std::string>& metadata = {});

// The same bytes as SaveSafetensors writes, in memory (for small files and tests).
absl::StatusOr<std::string> SerializeSafetensors(
    const StateDict& tensors, const std::map<std::string, std::string>& metadata = {});

// The header SaveSafetensors would write for these tensors (JSON text, padded), and the data
// section size; used to plan shards without writing anything.
absl::StatusOr<std::string> SafetensorsHeaderFor(
    const StateDict& tensors, const std::map<std::string, std::string>& metadata,
    uint64_t* data_size);

}  // namespace cctune

#endif  // CCTUNE_CHECKPOINT_SAFETENSORS_H_
