// libFuzzer target for the Parquet reader: any byte string must give rows or a Status
// (DataLoss / Unimplemented), never a crash, a hang or an allocation far beyond its size.
//   bazel --output_base=$HOME/.cache/cctune/fuzz build --config=fuzz //data:parquet_records_fuzzer
//   bazel-bin/data/parquet_records_fuzzer -max_total_time=120 CORPUS data/testdata
#include <cstddef>
#include <cstdint>
#include <string>

#include "data/parquet_records.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  auto rows = cctune::ParseParquetRecords(bytes, "fuzz.parquet");
  if (rows.ok()) {
    for (const cctune::JsonRecord& r : rows->records)
      (void)r.value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  return 0;
}
