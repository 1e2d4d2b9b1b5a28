// libFuzzer target for the llama2.c checkpoint loader: any file must give a Status or a state
// dict whose every tensor lies inside the file (checked by reading each one under ASan) and
// has the shape the header implies.
//   bazel --output_base=$HOME/.cache/cctune/fuzz build --config=fuzz //checkpoint:llama2c_fuzzer
//   D=checkpoint/fuzz/llama2c
//   bazel-bin/checkpoint/llama2c_fuzzer -max_total_time=120 -dict=$D.dict CORPUS ${D}_corpus
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "checkpoint/llama2c.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The loader maps a file: write the input to one per process.
  static const std::string path = [] {
    const char* tmp = std::getenv("TMPDIR");
    return std::string(tmp != nullptr ? tmp : "/tmp") + "/llama2c_fuzzer." +
           std::to_string(getpid()) + ".bin";
  }();
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return 0;
  if (size > 0 && std::fwrite(data, 1, size, f) != size) {
    std::fclose(f);
    return 0;
  }
  std::fclose(f);
  auto header = cctune::ParseLlama2cHeader(data, size, "fuzz");
  auto ck = cctune::LoadLlama2c(path);
  if (!ck.ok()) return 0;
  if (!header.ok() || header->ExpectedFileBytes() != static_cast<int64_t>(size)) {
    __builtin_trap();  // loaded a file whose size does not match its header
  }
  volatile float sink = 0;
  for (const auto& [name, tensor] : ck->state_dict) {
    auto values = tensor.ToFloatVector();  // reads every element
    if (!values.ok()) __builtin_trap();
    if (!values->empty()) sink = sink + (*values)[0] + values->back();
  }
  return 0;
}
