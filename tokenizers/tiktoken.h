// tiktoken-format byte-level BPE (Llama 3). The file holds one "<base64 bytes> <rank>" per
// line; a token's id is its rank, and special tokens follow the ranks. Encoding splits the
// text with a pre-tokenisation regex (PCRE2, JIT), then merges each piece's bytes, always
// joining the adjacent pair whose concatenation has the lowest rank (leftmost on ties), as
// tiktoken does. Repeated pieces hit a per-thread cache.
#ifndef CCTUNE_TOKENIZERS_TIKTOKEN_H_
#define CCTUNE_TOKENIZERS_TIKTOKEN_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "tokenizers/pcre2_split.h"
#include "tokenizers/tokenizer.h"

namespace cctune {
namespace internal {
struct PieceCache;
}  // namespace internal

// Llama 3's pre-tokenisation pattern (the cl100k pattern).
extern const char kLlama3Pattern[];

struct TiktokenOptions {
  std::string pattern;  // PCRE2 syntax; compiled with UTF and UCP
  // Ids num_base_tokens + i, in this order.
  std::vector<std::string> special_tokens;
  std::string bos_token;
  std::string eos_token;
  std::string pad_token;
  std::vector<std::string> stop_tokens;
};

// The Llama 3 pattern and its 256 special tokens (128000..128255 for Meta's file).
TiktokenOptions Llama3TiktokenOptions();

class TiktokenTokenizer final : public Tokenizer {
 public:
  // Loads a tiktoken file. Bad lines (invalid base64, a rank that is not a number, a duplicate
  // or missing rank, a duplicate token, a byte without a token) are errors naming the file
  // and line.
  static absl::StatusOr<std::unique_ptr<TiktokenTokenizer>> Load(const std::string& path,
                                                                 const TiktokenOptions& options);
  // The same from the file's contents; `source` names it in errors.
  static absl::StatusOr<std::unique_ptr<TiktokenTokenizer>> FromString(
      std::string_view contents, std::string_view source, const TiktokenOptions& options);
  ~TiktokenTokenizer() override;

  void EncodeAppend(std::string_view text, const EncodeOptions& options,
                    std::vector<int32_t>* ids) const override;
  // Special-token ids render as their text; invalid UTF-8 (a sequence cut between tokens)
  // becomes U+FFFD, as tiktoken's decode does.
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const override;
  absl::StatusOr<std::string> DecodePiece(int32_t id, int32_t prev_id) const override;

  int32_t bos_id() const override { return bos_id_; }
  int32_t eos_id() const override { return eos_id_; }
  int32_t pad_id() const override { return pad_id_; }
  int32_t vocab_size() const override { return num_base_tokens_ + num_special(); }
  absl::Span<const int32_t> stop_tokens() const override { return stop_tokens_; }
  std::optional<int32_t> SpecialTokenId(std::string_view token) const override;

  // Empties the calling thread's piece cache (benchmarks use it to time a cold cache).
  static void ClearThreadCache();

  int32_t num_base_tokens() const { return num_base_tokens_; }
  int32_t num_special() const { return static_cast<int32_t>(special_tokens_.size()); }

  // Testing hooks. PreTokenize: the regex pieces of valid UTF-8 `text`, from PCRE2 alone
  // (use_fast_path = false) or with the hand-written ASCII matcher in front.
  std::vector<std::string_view> PreTokenize(std::string_view text, bool use_fast_path) const;
  // BPE of one piece; `force_heap` uses the O(n log n) merge regardless of length.
  void BytePairEncode(std::string_view piece, bool force_heap, std::vector<int32_t>* ids) const;
  // The rank of exactly these bytes, or -1.
  int32_t Rank(std::string_view bytes) const {
    return Lookup(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }

 private:
  // A rank-table entry holds the token's first 8 bytes and length, so most lookups (tokens
  // of <= 8 bytes) compare without touching the arena.
  struct Slot {
    uint64_t head;  // first min(len, 8) bytes, little-endian, zero-padded
    uint32_t length;
    int32_t rank;  // -1: empty
  };

  TiktokenTokenizer() = default;
  absl::Status Init(std::string_view contents, std::string_view source,
                    const TiktokenOptions& options);

  int32_t Lookup(const uint8_t* p, size_t n) const;
  std::string_view TokenBytes(int32_t rank) const {
    return std::string_view(arena_.data() + offsets_[rank], offsets_[rank + 1] - offsets_[rank]);
  }
  // Encodes text without special tokens (valid UTF-8).
  void EncodeOrdinary(std::string_view text, std::vector<int32_t>* ids) const;
  void EncodePiece(const uint8_t* p, size_t n, internal::PieceCache& cache,
                   std::vector<int32_t>* ids) const;
  void MergeLinear(const uint8_t* p, size_t n, std::vector<int32_t>* ids) const;
  void MergeHeap(const uint8_t* p, size_t n, std::vector<int32_t>* ids) const;
  // Calls fn(start, length) for each pre-tokenisation piece of valid UTF-8 `text`.
  template <typename Fn>
  void ForEachPiece(std::string_view text, bool use_fast_path, Fn&& fn) const;
  // The ASCII matcher: the match length at `pos`, or 0 when PCRE2 must decide.
  size_t MatchAscii(std::string_view text, size_t pos) const;

  std::string arena_;              // token bytes, by rank
  std::vector<uint32_t> offsets_;  // [num_base_tokens + 1]
  std::vector<Slot> table_;
  uint64_t table_mask_ = 0;
  int32_t num_base_tokens_ = 0;
  int32_t byte_rank_[256] = {};
  std::vector<int32_t> pair_rank_;  // [65536]: ranks of all 2-byte tokens (-1: none), L2-sized

  std::vector<std::string> special_tokens_;
  absl::flat_hash_map<std::string, int32_t> special_ids_;
  std::vector<size_t> special_lengths_;  // distinct, longest first
  bool special_first_byte_[256] = {};

  std::unique_ptr<Pcre2Splitter> regex_;
  bool ascii_fast_path_ = false;  // the pattern is kLlama3Pattern

  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  int32_t pad_id_ = -1;
  std::vector<int32_t> stop_tokens_;
  uint64_t instance_id_ = 0;  // keys the per-thread piece cache
};

// Meta's Llama 3 tokenizer.model with Llama3TiktokenOptions().
absl::StatusOr<std::unique_ptr<Tokenizer>> MakeLlama3Tokenizer(const std::string& path);

}  // namespace cctune

#endif  // CCTUNE_TOKENIZERS_TIKTOKEN_H_
