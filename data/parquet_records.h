// Rows of a Parquet file as dataset records (data/json_records.h), so that the Hugging Face
// hub's Parquet datasets load as their JSON ones do. A small reader of its own, no library:
//   - leaf columns of type BOOLEAN, INT32, INT64, FLOAT, DOUBLE or BYTE_ARRAY (strings), in
//     groups (JSON objects) and inside at most one list: a list of strings or of structs (chat
//     turns: [{"from": ..., "value": ...}]) assembles from repetition and definition levels,
//     with LIST-annotated groups as JSON arrays; a null becomes JSON null;
//   - PLAIN and dictionary (PLAIN_DICTIONARY / RLE_DICTIONARY) encodings, RLE booleans, data
//     pages v1 and v2;
//   - UNCOMPRESSED and SNAPPY column chunks (pyarrow's default, which the hub's files use).
// Anything else (lists of lists, maps, INT96, fixed-length or DELTA-encoded columns, GZIP /
// ZSTD / ... codecs, encrypted files) is an Unimplemented error naming the file and the
// column, and saying to convert the file to JSON lines. A damaged file is DataLoss.
// A record's `line` is its 1-based row number in the file.
#ifndef CCTUNE_DATA_PARQUET_RECORDS_H_
#define CCTUNE_DATA_PARQUET_RECORDS_H_

#include <string>

#include "absl/status/statusor.h"
#include "data/json_records.h"

namespace cctune {

absl::StatusOr<JsonRecords> ReadParquetRecords(const std::string& path);
// The same for a file's bytes in memory; `file` names it in errors.
absl::StatusOr<JsonRecords> ParseParquetRecords(const std::string& bytes, const std::string& file);

// A dataset file by its extension: .parquet with ReadParquetRecords, anything else as JSON
// (ReadJsonRecords).
absl::StatusOr<JsonRecords> ReadRecordsFile(const std::string& path);

}  // namespace cctune

#endif  // CCTUNE_DATA_PARQUET_RECORDS_H_
