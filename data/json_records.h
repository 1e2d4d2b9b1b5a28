// Records of a local JSON dataset file, each with the line it starts on, so that errors can
// point at it. Two layouts are accepted (as Hugging Face's "json" loader does):
//   JSON lines  one object per line (blank lines skipped);
//   JSON array  a file whose first character is '[': an array of objects.
// A malformed line is an error naming the file and line number; column lookups name the
// column and list the ones the record has.
#ifndef CCTUNE_DATA_JSON_RECORDS_H_
#define CCTUNE_DATA_JSON_RECORDS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace cctune {

struct JsonRecord {
  nlohmann::json value;  // an object
  int64_t line = 0;      // 1-based line where the record starts
};

struct JsonRecords {
  std::string file;  // the path, for messages
  std::vector<JsonRecord> records;

  // "file:line" of record i.
  std::string Where(size_t i) const;
};

// The bytes of dataset file `path` (NotFound "cannot open dataset file ..." if it cannot be
// opened, DataLoss on a read error).
absl::StatusOr<std::string> ReadDatasetFile(const std::string& path);

// Reads and parses `path` (JSON lines, or a JSON array of objects).
absl::StatusOr<JsonRecords> ReadJsonRecords(const std::string& path);
// The same for text in memory; `file` names it in errors.
absl::StatusOr<JsonRecords> ParseJsonRecords(std::string_view text, const std::string& file);

// The value of `column` in record i, or InvalidArgument "file:line: no column 'x' (mapped
// from 'y'); the record has columns a, b, c". `mapped_from` is the dataset's name for the
// column when a column_map renamed it (empty: not renamed).
absl::StatusOr<const nlohmann::json*> GetColumn(const JsonRecords& records, size_t i,
                                                const std::string& column,
                                                const std::string& mapped_from = "");
// As GetColumn, and the value must be a string (else the error names its JSON type).
absl::StatusOr<std::string> GetStringColumn(const JsonRecords& records, size_t i,
                                            const std::string& column,
                                            const std::string& mapped_from = "");

}  // namespace cctune

#endif  // CCTUNE_DATA_JSON_RECORDS_H_
