// libFuzzer target for the safetensors parser: any byte string must give a Status or a header
// whose every entry lies inside the buffer (checked by touching its bytes under ASan).
//   bazel --output_base=... build --config=fuzz //checkpoint:safetensors_fuzzer
//   bazel-bin/checkpoint/safetensors_fuzzer -max_total_time=180 CORPUS_DIR tests/assets/checkpoint
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "checkpoint/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto header = cctune::ParseSafetensors(bytes, "fuzz");
  if (!header.ok()) return 0;
  std::vector<char> copy;
  for (const auto& [name, e] : header->tensors) {
    const size_t n = e.end - e.begin;
    if (header->data_start + e.end > size || n != static_cast<size_t>(
            cctune::NumElements(e.shape)) * cctune::DTypeSize(e.dtype)) {
      __builtin_trap();  // the parser let a bad entry through
    }
    copy.resize(n);
    if (n > 0) std::memcpy(copy.data(), bytes.data() + header->data_start + e.begin, n);
  }
  return 0;
}
