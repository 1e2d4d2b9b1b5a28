// libFuzzer target for the byte-level BPE loader (vocab.json + merges.txt) and, when the files
// load, encode/decode.
//   bazel run --config=fuzz //tokenizers:byte_level_bpe_load_fuzzer -- -max_total_time=60
// The input is "<vocab.json>\0<merges.txt>\0<text>"; with fewer than two NULs, the whole input
// is merges.txt (and the text), over a valid 256-token byte vocabulary extended by the result
// of each merge line, so the merge paths are reached often.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"
#include "tokenizers/byte_level_bpe.h"
#include "tokenizers/nfc.h"
#include "tokenizers/utf8.h"

namespace {

// GPT-2's byte-to-unicode alphabet, as a JSON key for byte b.
std::string ByteKey(int b) {
  static uint32_t cps[256];
  static bool init = false;
  if (!init) {
    uint32_t extra = 0;
    for (int i = 0; i < 256; ++i) {
      const bool printable = (i >= '!' && i <= '~') || (i >= 0xA1 && i <= 0xAC) || i >= 0xAE;
      cps[i] = printable ? i : 256 + extra++;
    }
    init = true;
  }
  const uint32_t cp = cps[b];
  std::string s;
  cctune::AppendUtf8(cp, &s);
  if (s == "\"" || s == "\\") s = "\\" + s;
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  std::string vocab, merges, text;
  const size_t a = in.find('\0');
  const size_t b = a == std::string_view::npos ? a : in.find('\0', a + 1);
  if (b != std::string_view::npos) {
    vocab = std::string(in.substr(0, a));
    merges = std::string(in.substr(a + 1, b - a - 1));
    text = std::string(in.substr(b + 1));
  } else {
    vocab = "{";
    for (int i = 0; i < 256; ++i) {
      vocab += (i ? ",\"" : "\"") + ByteKey(i) + "\":" + std::to_string(i);
    }
    // Each "x y" line's result joins the vocabulary (JSON-escaped; lines needing more than
    // quote and backslash escapes are left out, and a duplicate fails the load).
    int next_id = 256;
    size_t pos = 0;
    while (pos < in.size()) {
      size_t nl = in.find('\n', pos);
      if (nl == std::string_view::npos) nl = in.size();
      const std::string_view line = in.substr(pos, nl - pos);
      pos = nl + 1;
      const size_t space = line.find(' ');
      if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos) {
        continue;
      }
      std::string joined;
      bool ok = true;
      for (char c : std::string(line.substr(0, space)) + std::string(line.substr(space + 1))) {
        if (static_cast<unsigned char>(c) < 0x20) ok = false;
        if (c == '"' || c == '\\') joined += '\\';
        joined += c;
      }
      if (ok) vocab += ",\"" + joined + "\":" + std::to_string(next_id++);
    }
    vocab += "}";
    merges = std::string(in);
    text = std::string(in);
  }
  cctune::ByteLevelBpeOptions options;
  options.special_tokens = {{"<|im_end|>", 1 << 20}};
  options.eos_token = "<|im_end|>";
  auto tok = cctune::ByteLevelBpeTokenizer::FromStrings(vocab, "fuzz.json", merges, "fuzz.txt",
                                                        options);
  if (!tok.ok()) return 0;
  const std::vector<int32_t> ids = (*tok)->Encode(text, true, true);
  auto decoded = (*tok)->Decode(ids);
  CCTUNE_CHECK(decoded.ok(), "Decode: ", decoded.status().ToString());
  CCTUNE_CHECK(cctune::IsValidUtf8(*decoded));
  CCTUNE_CHECK(*decoded == cctune::NormalizeNfc(cctune::ReplaceInvalidUtf8(text)) + "<|im_end|>",
               "round trip");
  return 0;
}
