// GPT-2-style byte-level BPE from Hugging Face's vocab.json + merges.txt (Qwen2 / Qwen2.5),
// as torchtune's Qwen2Tokenizer and transformers' Qwen2TokenizerFast encode:
//   1. NFC normalisation (tokenizers/nfc.h), optional;
//   2. special tokens in the text become their ids (always: torchtune's Qwen2Tokenizer.encode
//      splits on them, whatever EncodeOptions.parse_special says);
//   3. the rest is split by the pre-tokeniser regex (PCRE2), each piece's UTF-8 bytes are
//      symbols, and the adjacent pair with the lowest merge rank (its line in merges.txt) is
//      joined, leftmost first, until no pair is a merge. Pieces hit a bounded cache.
// vocab.json holds tokens as GPT-2's byte-to-unicode strings (each byte one printable code
// point); decoding maps them back and replaces invalid UTF-8 with U+FFFD per run between
// special tokens (Python's errors="replace"). Special tokens decode to their text.
//
//   ASSIGN_OR_RETURN(auto tok, MakeQwen2_5Tokenizer(vocab, merges, /*special_tokens_path=*/""));
#ifndef CCTUNE_TOKENIZERS_BYTE_LEVEL_BPE_H_
#define CCTUNE_TOKENIZERS_BYTE_LEVEL_BPE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "tokenizers/nfc.h"
#include "tokenizers/pcre2_split.h"
#include "tokenizers/tokenizer.h"

namespace cctune {
namespace internal {
struct BpeCache;
}  // namespace internal

// Qwen2's pre-tokenisation pattern (the cl100k pattern with single digits).
extern const char kQwen2Pattern[];

struct ByteLevelBpeOptions {
  std::string pattern = kQwen2Pattern;
  bool nfc = true;
  // (text, id), e.g. Qwen2.5's 22 tokens from 151643. Ids must not collide with vocab ids.
  std::vector<std::pair<std::string, int32_t>> special_tokens;
  std::string bos_token;  // "" for none (Qwen: none, bos_id() is -1)
  std::string eos_token;
  std::string pad_token;
  std::vector<std::string> stop_tokens;
  // Most pieces the merge cache holds before it starts over (torchtune's bpe_cache_size);
  // 0: no cache.
  size_t cache_entries = 151646;
};

class ByteLevelBpeTokenizer final : public Tokenizer {
 public:
  // Loads vocab.json and merges.txt. Errors name the file and the entry: a token that is not
  // byte-level text, a byte with no token, a merge line that is not two tokens, a merge whose
  // parts or result are not in the vocabulary, a special token missing from the options' ids
  // or named as bos/eos/pad but not defined.
  static absl::StatusOr<std::unique_ptr<ByteLevelBpeTokenizer>> Load(
      const std::string& vocab_path, const std::string& merges_path,
      const ByteLevelBpeOptions& options);
  // The same from the files' contents; the names are for errors.
  static absl::StatusOr<std::unique_ptr<ByteLevelBpeTokenizer>> FromStrings(
      std::string_view vocab_json, std::string_view vocab_name, std::string_view merges_txt,
      std::string_view merges_name, const ByteLevelBpeOptions& options);
  ~ByteLevelBpeTokenizer() override;

  void EncodeAppend(std::string_view text, const EncodeOptions& options,
                    std::vector<int32_t>* ids) const override;
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const override;
  absl::StatusOr<std::string> DecodePiece(int32_t id, int32_t prev_id) const override;

  int32_t bos_id() const override { return bos_id_; }
  int32_t eos_id() const override { return eos_id_; }
  int32_t pad_id() const override { return pad_id_; }
  // One more than the largest id (vocabulary or special).
  int32_t vocab_size() const override { return vocab_size_; }
  absl::Span<const int32_t> stop_tokens() const override { return stop_tokens_; }
  std::optional<int32_t> SpecialTokenId(std::string_view token) const override;

  // The lowest special-token id (torchtune's decode(skip_special_tokens=True) drops ids from
  // it when all specials follow the vocabulary); -1 without special tokens.
  int32_t first_special_id() const { return first_special_id_; }
  int32_t num_merges() const { return static_cast<int32_t>(merges_.size()); }

  // Testing hooks: the pre-tokeniser's pieces, and the BPE of one piece's bytes.
  std::vector<std::string> PreTokenize(std::string_view text) const;
  void EncodePiece(std::string_view bytes, std::vector<int32_t>* ids) const;

 private:
  struct MergeRule {
    int32_t rank;
    int32_t result;
  };

  ByteLevelBpeTokenizer();
  absl::Status Init(std::string_view vocab_json, std::string_view vocab_name,
                    std::string_view merges_txt, std::string_view merges_name,
                    const ByteLevelBpeOptions& options);
  // Text without special tokens, already normalised.
  void EncodeOrdinary(std::string_view text, std::vector<int32_t>* ids) const;
  void MergeBytes(std::string_view bytes, std::vector<int32_t>* ids) const;
  const MergeRule* FindMerge(int32_t left, int32_t right) const {
    auto it = merges_.find((static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
                           static_cast<uint32_t>(right));
    return it == merges_.end() ? nullptr : &it->second;
  }

  std::vector<std::string> token_bytes_;  // by id; empty: no vocabulary token
  std::vector<uint8_t> is_vocab_;         // by id
  absl::flat_hash_map<std::string, int32_t> vocab_;  // raw bytes -> id
  int32_t byte_id_[256] = {};
  absl::flat_hash_map<uint64_t, MergeRule> merges_;  // (left << 32 | right) -> merge

  std::vector<std::string> special_text_;  // by id - first_special_id_ ("" where none)
  absl::flat_hash_map<std::string, int32_t> special_ids_;
  std::vector<size_t> special_lengths_;  // distinct, longest first
  bool special_first_byte_[256] = {};
  int32_t first_special_id_ = -1;

  std::unique_ptr<Pcre2Splitter> splitter_;
  bool nfc_ = true;
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  int32_t pad_id_ = -1;
  int32_t vocab_size_ = 0;
  std::vector<int32_t> stop_tokens_;
  std::unique_ptr<internal::BpeCache> cache_;
};

// Qwen2.5's special tokens (<|endoftext|> 151643 ... <|file_sep|> 151664), in id order.
std::vector<std::pair<std::string, int32_t>> Qwen2_5SpecialTokens();

// The special tokens of a Hugging Face tokenizer.json: its "added_tokens" entries
// ({"content", "id"}), as torchtune's parse_hf_tokenizer_json reads them.
absl::StatusOr<std::vector<std::pair<std::string, int32_t>>> ReadHfSpecialTokens(
    const std::string& tokenizer_json_path);

// torchtune's Qwen2_5Tokenizer defaults (special tokens Qwen2_5SpecialTokens()).
ByteLevelBpeOptions Qwen2_5Options();

// torchtune's Qwen2_5Tokenizer: Qwen2's pattern, NFC, eos <|im_end|>, pad <|endoftext|>, no
// BOS; generation stops at <|im_end|> (torchtune's stop_tokens [eos_id, im_end_id]). The
// special tokens come from special_tokens_path (a tokenizer.json) when it is not empty, else
// Qwen2_5SpecialTokens().
absl::StatusOr<std::unique_ptr<ByteLevelBpeTokenizer>> MakeQwen2_5Tokenizer(
    const std::string& vocab_path, const std::string& merges_path,
    const std::string& special_tokens_path);

}  // namespace cctune

#endif  // CCTUNE_TOKENIZERS_BYTE_LEVEL_BPE_H_
