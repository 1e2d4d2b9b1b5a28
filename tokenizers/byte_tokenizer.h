// A byte-level tokenizer the project defines itself (for tests and the demo model): ids
// 0..255 are the bytes of the text, followed by eight special tokens with Llama 3's names, so
// every prompt format works, llama3_chat included:
//   256 <|begin_of_text|> (BOS)   257 <|end_of_text|> (EOS)   258 <|pad|>
//   259 <|start_header_id|>       260 <|end_header_id|>       261 <|eot_id|>
//   262 <|eom_id|>                263 <|python_tag|>
// vocab_size() is 264. Any byte string encodes losslessly; no file is needed.
#ifndef CCTUNE_TOKENIZERS_BYTE_TOKENIZER_H_
#define CCTUNE_TOKENIZERS_BYTE_TOKENIZER_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tokenizers/tokenizer.h"

namespace cctune {

class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kNumBytes = 256;
  static constexpr int32_t kBos = 256;
  static constexpr int32_t kEos = 257;
  static constexpr int32_t kPad = 258;
  static constexpr int32_t kStartHeader = 259;
  static constexpr int32_t kEndHeader = 260;
  static constexpr int32_t kEot = 261;
  static constexpr int32_t kEom = 262;
  static constexpr int32_t kPythonTag = 263;
  static constexpr int32_t kVocabSize = 264;

  ByteTokenizer() = default;

  // One id per byte. parse_special: the text of a special token ("<|eot_id|>") becomes its
  // id; otherwise it is encoded as its bytes. trim_leading_whitespace is ignored (there is no
  // dummy-prefix space to drop).
  void EncodeAppend(std::string_view text, const EncodeOptions& options,
                    std::vector<int32_t>* ids) const override;
  // The bytes as valid UTF-8 (invalid sequences become U+FFFD). BOS, EOS and PAD print
  // nothing; the other special tokens print their text.
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const override;
  // The raw byte (or the special token's text; nothing for BOS, EOS and PAD).
  absl::StatusOr<std::string> DecodePiece(int32_t id, int32_t prev_id) const override;

  int32_t bos_id() const override { return kBos; }
  int32_t eos_id() const override { return kEos; }
  int32_t pad_id() const override { return kPad; }
  int32_t vocab_size() const override { return kVocabSize; }
  // EOS, <|eot_id|> and <|eom_id|>.
  absl::Span<const int32_t> stop_tokens() const override { return kStopTokens; }
  std::optional<int32_t> SpecialTokenId(std::string_view token) const override;

  // "<|eot_id|>" for kEot etc.; empty for byte ids.
  static std::string_view SpecialTokenText(int32_t id);

 private:
  static constexpr std::array<int32_t, 3> kStopTokens = {kEos, kEot, kEom};
};

}  // namespace cctune

#endif  // CCTUNE_TOKENIZERS_BYTE_TOKENIZER_H_
