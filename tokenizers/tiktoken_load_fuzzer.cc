// libFuzzer target for the tiktoken loader and, when a file loads, encode/decode.
//   bazel run --config=fuzz //tokenizers:tiktoken_load_fuzzer -- -max_total_time=60
// The first input byte picks the mode: even, the rest is the whole file; odd, the rest is
// appended to a valid 256-byte base vocabulary, so merges, ranks and the BPE paths are reached
// often. The input is then encoded (with and without special tokens) and decoded again.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"
#include "tokenizers/tiktoken.h"
#include "tokenizers/utf8.h"

namespace {

std::string Base64(const std::string& bytes) {
  static const char* kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = static_cast<uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) v |= static_cast<uint8_t>(bytes[i + 2]);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[v & 63] : '=';
  }
  return out;
}

const std::string& BaseVocabulary() {
  static const std::string* base = [] {
    auto* s = new std::string();
    for (int b = 0; b < 256; ++b) {
      *s += Base64(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
    }
    return s;
  }();
  return *base;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string file;
  if (data[0] & 1) {
    file = BaseVocabulary();
    file.append(rest.data(), rest.size());
  } else {
    file.assign(rest.data(), rest.size());
  }
  cctune::TiktokenOptions options = cctune::Llama3TiktokenOptions();
  auto tok = cctune::TiktokenTokenizer::FromString(file, "fuzz.tiktoken", options);
  if (!tok.ok()) return 0;
  for (const bool parse_special : {false, true}) {
    cctune::EncodeOptions encode;
    encode.add_bos = true;
    encode.parse_special = parse_special;
    const std::vector<int32_t> ids = (*tok)->Encode(rest, encode);
    auto text = (*tok)->Decode(ids);
    CCTUNE_CHECK(text.ok(), "Decode: ", text.status().ToString());
    CCTUNE_CHECK(cctune::IsValidUtf8(*text));
    if (!parse_special && cctune::IsValidUtf8(rest)) {
      // Byte-level BPE is lossless on valid UTF-8.
      CCTUNE_CHECK(*text == "<|begin_of_text|>" + std::string(rest), "round trip");
    }
  }
  return 0;
}
