// libFuzzer target for the SentencePiece .model reader and, when a model loads, its encoders
// and decoder. Seeds: tokenizers/fuzz_corpus/sentencepiece_load_fuzzer/.
//   tools/fuzz.sh //tokenizers:sentencepiece_load_fuzzer_smoke   (FUZZ_SECONDS=60 for longer)
// The input is the .model file; once loaded, a fixed text and the input's own bytes are
// encoded, decoded and streamed piece by piece.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizers/sentencepiece.h"
#include "tokenizers/utf8.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto tok = cctune::SentencePieceTokenizer::FromString(bytes, "fuzz.model");
  if (!tok.ok()) {
    const absl::StatusCode code = tok.status().code();
    CCTUNE_CHECK(code == absl::StatusCode::kInvalidArgument ||
                     code == absl::StatusCode::kUnimplemented,
                 "load: ", tok.status().ToString());
    return 0;
  }
  const cctune::SentencePieceTokenizer& t = **tok;
  for (const std::string_view text :
       {std::string_view("  Hello  world\n\t12345 \xE2\x96\x81<s> \xF0\x9F\x99\x82 \xFF"),
        bytes.substr(0, 256)}) {
    cctune::EncodeOptions options;
    options.add_bos = true;
    options.add_eos = true;
    options.trim_leading_whitespace = text.size() % 2 == 1;
    const std::vector<int32_t> ids = t.Encode(text, options);
    for (int32_t id : ids) CCTUNE_CHECK(id >= 0 && id < t.vocab_size());
    auto decoded = t.Decode(ids);
    CCTUNE_CHECK(decoded.ok(), "Decode: ", decoded.status().ToString());
    CCTUNE_CHECK(cctune::IsValidUtf8(*decoded));
    int32_t prev = -1;
    for (int32_t id : ids) {
      CCTUNE_CHECK(t.DecodePiece(id, prev).ok());
      prev = id;
    }
  }
  return 0;
}
