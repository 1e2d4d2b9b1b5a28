// libFuzzer target for the llama2.c tokenizer loader and, when a file loads, encode/decode.
//   bazel run --config=fuzz //tokenizers:llama2c_load_fuzzer -- -max_total_time=60
// The input is the .bin file; once loaded, the same bytes are encoded as text and decoded.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"
#include "tokenizers/llama2c.h"
#include "tokenizers/utf8.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto tok = cctune::Llama2cTokenizer::FromString(bytes, "fuzz.bin");
  if (!tok.ok()) return 0;
  const std::vector<int32_t> ids = (*tok)->Encode(bytes.substr(0, 512), true, true);
  for (int32_t id : ids) CCTUNE_CHECK(id >= 0 && id < (*tok)->vocab_size());
  auto text = (*tok)->Decode(ids);
  CCTUNE_CHECK(text.ok(), "Decode: ", text.status().ToString());
  CCTUNE_CHECK(cctune::IsValidUtf8(*text));
  return 0;
}
