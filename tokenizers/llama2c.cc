#include "tokenizers/llama2c.h"

#include <cstring>
#include <queue>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "tokenizers/utf8.h"

namespace cctune {
namespace {

absl::string_view AbslView(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// run.c only merges pairs scoring above its initial best_score of -1e10.
constexpr float kMinMergeScore = -1e10f;

// "<0xAB>" -> 0xAB; -1 for anything else.
int ParseBytePiece(const std::string& piece) {
  if (piece.size() != 6 || piece.compare(0, 3, "<0x") != 0 || piece[5] != '>') return -1;
  int value = 0;
  for (int i = 3; i < 5; ++i) {
    const char c = piece[i];
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'A' && c <= 'F') {
      digit = c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else {
      return -1;
    }
    value = value * 16 + digit;
  }
  return value;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Llama2cTokenizer>> Llama2cTokenizer::Load(
    const std::string& path, int32_t expected_vocab_size) {
  CCTUNE_ASSIGN_OR_RETURN(std::string contents, ReadTokenizerFile(path));
  return FromString(contents, path, expected_vocab_size);
}

absl::StatusOr<std::unique_ptr<Llama2cTokenizer>> Llama2cTokenizer::FromString(
    std::string_view contents, std::string_view source, int32_t expected_vocab_size) {
  std::unique_ptr<Llama2cTokenizer> tok(new Llama2cTokenizer());
  CCTUNE_RETURN_IF_ERROR(tok->Init(contents, source, expected_vocab_size));
  return tok;
}

absl::Status Llama2cTokenizer::Init(std::string_view contents, std::string_view source_view,
                                    int32_t expected_vocab_size) {
  const std::string source(source_view);
  size_t offset = 0;
  auto read_i32 = [&](int32_t* v) {
    std::memcpy(v, contents.data() + offset, 4);
    offset += 4;
  };
  if (contents.size() < 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": truncated llama2.c tokenizer: ", contents.size(),
        " bytes, need 4 for max_token_length"));
  }
  read_i32(&max_token_length_);
  if (max_token_length_ <= 0 || max_token_length_ > (1 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": max_token_length ", max_token_length_, " is not in [1, 1048576]"));
  }
  while (offset < contents.size()) {
    const int64_t index = static_cast<int64_t>(pieces_.size());
    if (expected_vocab_size > 0 && index == expected_vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": ", contents.size() - offset, " bytes left after the ", expected_vocab_size,
          " tokens the model expects (byte offset ", offset, ")"));
    }
    if (contents.size() - offset < 8) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": truncated at token ", index, " (byte offset ", offset, "): need 8 bytes for ",
          "score and length, ", contents.size() - offset, " left"));
    }
    float score;
    std::memcpy(&score, contents.data() + offset, 4);
    offset += 4;
    int32_t length;
    read_i32(&length);
    if (length < 0 || length > max_token_length_) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": token ", index, " (byte offset ", offset - 4, ") has length ", length,
          ", outside [0, max_token_length ", max_token_length_, "]"));
    }
    if (contents.size() - offset < static_cast<size_t>(length)) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": truncated at token ", index, " (byte offset ", offset, "): need ", length,
          " bytes, ", contents.size() - offset, " left"));
    }
    pieces_.emplace_back(contents.substr(offset, length));
    scores_.push_back(score);
    offset += length;
  }
  if (expected_vocab_size > 0 && static_cast<int32_t>(pieces_.size()) != expected_vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": has ", pieces_.size(),
                                                   " tokens, the model expects ",
                                                   expected_vocab_size));
  }
  if (pieces_.size() < 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": has ", pieces_.size(), " tokens; need at least 3 (unk, BOS, EOS)"));
  }
  decoded_.resize(pieces_.size());
  for (size_t id = 0; id < pieces_.size(); ++id) {
    ids_.emplace(pieces_[id], static_cast<int32_t>(id));  // keeps the lowest id
    const int byte = ParseBytePiece(pieces_[id]);
    decoded_[id] = byte >= 0 ? std::string(1, static_cast<char>(byte)) : pieces_[id];
  }
  space_id_ = Find(" ");
  stop_tokens_ = {eos_id(), bos_id()};
  return absl::OkStatus();
}

int32_t Llama2cTokenizer::Find(std::string_view s) const {
  const auto it = ids_.find(AbslView(s));
  return it == ids_.end() ? -1 : it->second;
}

void Llama2cTokenizer::EncodeAppend(std::string_view text, const EncodeOptions& options,
                                    std::vector<int32_t>* ids) const {
  if (options.add_bos) ids->push_back(bos_id());
  std::vector<int32_t> tokens;
  tokens.reserve(text.size() + 1);
  if (!text.empty() && !options.trim_leading_whitespace && space_id_ >= 0) {
    tokens.push_back(space_id_);
  }
  // Characters: a lead byte and up to three continuation bytes, as run.c groups them (also
  // for malformed UTF-8), looked up whole or emitted as byte tokens.
  const int32_t n_vocab = vocab_size();
  size_t i = 0;
  while (i < text.size()) {
    size_t len = 1;
    while (len < 4 && i + len < text.size() &&
           (static_cast<uint8_t>(text[i + len]) & 0xC0) == 0x80) {
      ++len;
    }
    const int32_t id = Find(text.substr(i, len));
    if (id >= 0) {
      tokens.push_back(id);
    } else {
      for (size_t k = 0; k < len; ++k) {
        const int32_t byte_id = static_cast<uint8_t>(text[i + k]) + 3;
        tokens.push_back(byte_id < n_vocab ? byte_id : 0);
      }
    }
    i += len;
  }

  // Greedy merging by score. Tokens form a linked list; the heap holds candidate pairs keyed
  // by (score desc, position asc) and is checked against the list when popped.
  const size_t n = tokens.size();
  if (n >= 2) {
    struct Candidate {
      float score;
      uint32_t left;
      int32_t left_id;
      int32_t right_id;
      int32_t merged;
      uint32_t right;
    };
    auto worse = [](const Candidate& a, const Candidate& b) {
      return a.score != b.score ? a.score < b.score : a.left > b.left;
    };
    std::priority_queue<Candidate, std::vector<Candidate>, decltype(worse)> heap(worse);
    std::vector<uint32_t> next(n), prev(n);
    std::vector<uint8_t> alive(n, 1);
    for (size_t k = 0; k < n; ++k) {
      next[k] = static_cast<uint32_t>(k + 1);
      prev[k] = static_cast<uint32_t>(k) - 1;
    }
    std::string scratch;
    auto push = [&](uint32_t left) {
      const uint32_t right = next[left];
      if (right >= n) return;
      scratch = pieces_[tokens[left]];
      scratch += pieces_[tokens[right]];
      const int32_t merged = Find(scratch);
      if (merged >= 0 && scores_[merged] > kMinMergeScore) {
        heap.push(Candidate{scores_[merged], left, tokens[left], tokens[right], merged, right});
      }
    };
    for (uint32_t k = 0; k + 1 < n; ++k) push(k);
    while (!heap.empty()) {
      const Candidate c = heap.top();
      heap.pop();
      if (!alive[c.left] || next[c.left] != c.right || !alive[c.right] ||
          tokens[c.left] != c.left_id || tokens[c.right] != c.right_id) {
        continue;  // stale: a neighbour merged since
      }
      tokens[c.left] = c.merged;
      alive[c.right] = 0;
      next[c.left] = next[c.right];
      if (next[c.left] < n) prev[next[c.left]] = c.left;
      if (c.left > 0 && prev[c.left] < n) push(prev[c.left]);
      push(c.left);
    }
    for (uint32_t k = 0; k < n; k = next[k]) ids->push_back(tokens[k]);
  } else {
    ids->insert(ids->end(), tokens.begin(), tokens.end());
  }
  if (options.add_eos) ids->push_back(eos_id());
}

absl::StatusOr<std::string> Llama2cTokenizer::DecodePiece(int32_t id, int32_t prev_id) const {
  CCTUNE_RETURN_IF_ERROR(CheckTokenId(id, vocab_size(), "llama2.c DecodePiece"));
  if (id == bos_id() || id == eos_id()) return std::string();
  const std::string& piece = decoded_[id];
  if ((prev_id < 0 || prev_id == bos_id()) && !piece.empty() && piece[0] == ' ' &&
      pieces_[id][0] == ' ') {
    return piece.substr(1);
  }
  return piece;
}

absl::StatusOr<std::string> Llama2cTokenizer::Decode(absl::Span<const int32_t> ids) const {
  std::string bytes;
  int32_t prev = -1;
  for (const int32_t id : ids) {
    CCTUNE_ASSIGN_OR_RETURN(const std::string piece, DecodePiece(id, prev));
    bytes += piece;
    prev = id;
  }
  if (IsValidUtf8(bytes)) return bytes;
  return ReplaceInvalidUtf8(bytes);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> MakeLlama2cTokenizer(const std::string& path,
                                                                int32_t expected_vocab_size) {
  CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<Llama2cTokenizer> tok,
                          Llama2cTokenizer::Load(path, expected_vocab_size));
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

}  // namespace cctune
