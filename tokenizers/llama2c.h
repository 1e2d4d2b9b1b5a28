// llama2.c's tokenizer (.bin: int32 max_token_length, then per token float32 score, int32
// length, bytes; the vocabulary size is the token count). Encoding follows run.c's encode():
// BOS, the dummy-prefix " " token, each UTF-8 character looked up whole or split into byte
// tokens <0xXX> (id byte + 3), then repeatedly merge the adjacent pair whose concatenation is
// the highest-scoring token (leftmost on ties). Decoding follows run.c's decode(). Merging
// uses a heap, O(n log n), instead of run.c's rescans; the merge order is the same.
#ifndef CCTUNE_TOKENIZERS_LLAMA2C_H_
#define CCTUNE_TOKENIZERS_LLAMA2C_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "tokenizers/tokenizer.h"

namespace cctune {

class Llama2cTokenizer final : public Tokenizer {
 public:
  // expected_vocab_size > 0 requires exactly that many tokens (run.c takes it from the model
  // header). A truncated or inconsistent file is an error naming the file, token and offset.
  static absl::StatusOr<std::unique_ptr<Llama2cTokenizer>> Load(const std::string& path,
                                                                int32_t expected_vocab_size = 0);
  static absl::StatusOr<std::unique_ptr<Llama2cTokenizer>> FromString(
      std::string_view contents, std::string_view source, int32_t expected_vocab_size = 0);

  // parse_special is ignored. trim_leading_whitespace drops the dummy-prefix token. Unlike
  // run.c, which stops at a NUL byte, the whole string_view is encoded.
  void EncodeAppend(std::string_view text, const EncodeOptions& options,
                    std::vector<int32_t>* ids) const override;
  // run.c's pieces concatenated (BOS and EOS give nothing; the first piece, and the one after
  // BOS, lose a leading space), then made valid UTF-8.
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const override;
  // run.c's decode(prev, id): raw bytes; <0xXX> gives the byte.
  absl::StatusOr<std::string> DecodePiece(int32_t id, int32_t prev_id) const override;

  int32_t bos_id() const override { return 1; }
  int32_t eos_id() const override { return 2; }
  int32_t pad_id() const override { return 0; }
  int32_t vocab_size() const override { return static_cast<int32_t>(pieces_.size()); }
  // EOS, and BOS: run.c stops generating when it samples BOS, which separates TinyStories.
  absl::Span<const int32_t> stop_tokens() const override { return stop_tokens_; }

  const std::string& piece(int32_t id) const { return pieces_[id]; }
  float score(int32_t id) const { return scores_[id]; }
  int32_t max_token_length() const { return max_token_length_; }

 private:
  Llama2cTokenizer() = default;
  absl::Status Init(std::string_view contents, std::string_view source,
                    int32_t expected_vocab_size);
  int32_t Find(std::string_view s) const;

  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::vector<std::string> decoded_;  // bytes each id prints (byte tokens resolved)
  absl::flat_hash_map<std::string, int32_t> ids_;  // piece -> lowest id with that text
  int32_t max_token_length_ = 0;
  int32_t space_id_ = -1;  // the dummy prefix " "
  std::vector<int32_t> stop_tokens_;
};

// A llama2.c tokenizer .bin (stories260K's tok512.bin, or llama2.c's tokenizer.bin).
absl::StatusOr<std::unique_ptr<Tokenizer>> MakeLlama2cTokenizer(const std::string& path,
                                                                int32_t expected_vocab_size = 0);

}  // namespace cctune

#endif  // CCTUNE_TOKENIZERS_LLAMA2C_H_
