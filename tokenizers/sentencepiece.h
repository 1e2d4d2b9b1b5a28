// Llama 2's tokenizer: a thin wrapper over libsentencepiece (Debian's libsentencepiece-dev).
// Encoding and decoding are SentencePiece's own; this adds BOS/EOS, torchtune's
// trim_leading_whitespace, range-checked ids and run.c-style pieces for streaming.
#ifndef CCTUNE_TOKENIZERS_SENTENCEPIECE_H_
#define CCTUNE_TOKENIZERS_SENTENCEPIECE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizers/tokenizer.h"

namespace cctune {
namespace internal {
class SentencePieceBridge;
}  // namespace internal

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // Loads a SentencePiece .model; errors name the path. A model without a pad id gets 0, as
  // torchtune's Llama 2 tokenizer does.
  static absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> Load(const std::string& path);
  ~SentencePieceTokenizer() override;

  // Invalid UTF-8 is replaced by U+FFFD first. parse_special is ignored: SentencePiece never
  // turns text such as "<s>" into control ids. trim_leading_whitespace encodes "\n" + text
  // and drops the ids of "\n", which removes the dummy-prefix space (torchtune's trick).
  void EncodeAppend(std::string_view text, const EncodeOptions& options,
                    std::vector<int32_t>* ids) const override;
  // SentencePiece's decode: control ids vanish, byte pieces join into characters.
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const override;
  // "▁" becomes a space, dropped at the start of the text (prev_id < 0) and after BOS, as in
  // llama2.c's run.c; byte pieces give their byte; control ids give "".
  absl::StatusOr<std::string> DecodePiece(int32_t id, int32_t prev_id) const override;

  int32_t bos_id() const override { return bos_id_; }
  int32_t eos_id() const override { return eos_id_; }
  int32_t pad_id() const override { return pad_id_; }
  int32_t vocab_size() const override { return vocab_size_; }
  absl::Span<const int32_t> stop_tokens() const override { return stop_tokens_; }

 private:
  SentencePieceTokenizer() = default;

  std::unique_ptr<internal::SentencePieceBridge> sp_;
  std::string path_;
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  int32_t pad_id_ = 0;
  int32_t vocab_size_ = 0;
  std::vector<int32_t> stop_tokens_;
  size_t newline_prefix_ids_ = 0;  // number of ids SentencePiece gives "\n"
};

// Meta's Llama 2 tokenizer.model.
absl::StatusOr<std::unique_ptr<Tokenizer>> MakeLlama2Tokenizer(const std::string& path);

}  // namespace cctune

#endif  // CCTUNE_TOKENIZERS_SENTENCEPIECE_H_
