#include "tokenizers/tiktoken.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <queue>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "tokenizers/pcre2_split.h"
#include "tokenizers/utf8.h"

namespace cctune {

const char kLlama3Pattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

TiktokenOptions Llama3TiktokenOptions() {
  TiktokenOptions o;
  o.pattern = kLlama3Pattern;
  // Meta's order (llama3 tokenizer.py, torchtune's llama3 tokenizer): eleven named tokens,
  // then reserved tokens numbered from 2 up to fill 256 slots.
  o.special_tokens = {
      "<|begin_of_text|>",           "<|end_of_text|>",   "<|reserved_special_token_0|>",
      "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|step_id|>",
      "<|start_header_id|>",         "<|end_header_id|>", "<|eom_id|>",
      "<|eot_id|>",                  "<|python_tag|>",
  };
  const int num_named = static_cast<int>(o.special_tokens.size());
  for (int i = 0; i < 256 - num_named; ++i) {
    o.special_tokens.push_back(absl::StrCat("<|reserved_special_token_", 2 + i, "|>"));
  }
  o.bos_token = "<|begin_of_text|>";
  o.eos_token = "<|end_of_text|>";
  o.pad_token = "<|finetune_right_pad_id|>";
  o.stop_tokens = {"<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"};
  return o;
}

namespace {

absl::string_view AbslView(std::string_view s) { return absl::string_view(s.data(), s.size()); }

inline uint64_t Mix(uint64_t x) {
  x ^= x >> 32;
  x *= 0xd6e8feb86659fd93ULL;
  x ^= x >> 32;
  x *= 0xd6e8feb86659fd93ULL;
  x ^= x >> 32;
  return x;
}

// The first min(n, 8) bytes of p as a little-endian word, zero-padded, reading no further.
inline uint64_t LoadHead(const uint8_t* p, size_t n) {
  if (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    return w;
  }
  uint64_t w = 0;
  switch (n) {
    case 7: w |= uint64_t{p[6]} << 48; [[fallthrough]];
    case 6: w |= uint64_t{p[5]} << 40; [[fallthrough]];
    case 5: w |= uint64_t{p[4]} << 32; [[fallthrough]];
    case 4: w |= uint64_t{p[3]} << 24; [[fallthrough]];
    case 3: w |= uint64_t{p[2]} << 16; [[fallthrough]];
    case 2: w |= uint64_t{p[1]} << 8; [[fallthrough]];
    case 1: w |= uint64_t{p[0]}; break;
    default: break;
  }
  return w;
}

// Hash of a byte string whose head word is `head`: the remaining bytes are folded in 8 at a
// time with a multiply-xorshift, then mixed.
inline uint64_t HashBytes(uint64_t head, const uint8_t* p, size_t n) {
  uint64_t h = head ^ (0x9E3779B97F4A7C15ULL * (n + 1));
  for (size_t i = 8; i < n; i += 8) {
    h = (h ^ LoadHead(p + i, n - i)) * 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 29;
  }
  return Mix(h);
}

// Strict standard base64 (with padding). Returns false on any malformed input.
bool DecodeBase64(std::string_view in, std::string* out) {
  static const auto kTable = [] {
    std::array<int8_t, 256> t{};
    t.fill(-1);
    const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) t[static_cast<uint8_t>(alphabet[i])] = static_cast<int8_t>(i);
    return t;
  }();
  out->clear();
  if (in.empty() || in.size() % 4 != 0) return false;
  for (size_t i = 0; i < in.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const uint8_t c = static_cast<uint8_t>(in[i + k]);
      if (c == '=') {
        // Padding only in the last group's final one or two places.
        if (i + 4 != in.size() || k < 2) return false;
        ++pad;
        v[k] = 0;
      } else {
        if (pad > 0 || kTable[c] < 0) return false;
        v[k] = kTable[c];
      }
    }
    const uint32_t bits = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
    out->push_back(static_cast<char>(bits >> 16));
    if (pad < 2) out->push_back(static_cast<char>((bits >> 8) & 0xFF));
    if (pad < 1) out->push_back(static_cast<char>(bits & 0xFF));
    // Non-canonical encodings (stray bits in the padded group) are rejected too.
    if ((pad == 1 && (bits & 0xFF) != 0) || (pad == 2 && (bits & 0xFFFF) != 0)) return false;
  }
  return true;
}

std::string Shorten(std::string_view s) {
  const size_t kMax = 40;
  std::string shown = absl::CHexEscape(AbslView(s.substr(0, kMax)));
  if (s.size() > kMax) shown += "...";
  return shown;
}


}  // namespace

namespace internal {

// Merges of pieces that are not single tokens, per thread, for one tokenizer at a time
// (encoding with two tokenizers in turn on one thread empties it at each switch).
struct PieceCache {
  uint64_t owner = 0;
  absl::flat_hash_map<std::string, std::pair<uint32_t, uint32_t>> spans;  // -> [begin, count)
  std::vector<int32_t> ids;

  void Reset(uint64_t new_owner) {
    owner = new_owner;
    spans.clear();
    ids.clear();
  }
};

}  // namespace internal

namespace {

using internal::PieceCache;

constexpr size_t kMaxCachedPiece = 64;
constexpr size_t kMaxCacheEntries = 1 << 17;
constexpr size_t kLinearMergeMax = 96;  // longer pieces use the heap merge

std::atomic<uint64_t> next_instance_id{1};

PieceCache& ThreadPieceCache() {
  thread_local PieceCache cache;
  return cache;
}

inline bool IsAsciiLetter(uint8_t c) { return static_cast<uint8_t>((c | 0x20) - 'a') < 26; }
inline bool IsAsciiDigit(uint8_t c) { return static_cast<uint8_t>(c - '0') < 10; }
inline bool IsAsciiSpace(uint8_t c) { return c == ' ' || (c >= 0x09 && c <= 0x0D); }
inline bool IsCrLf(uint8_t c) { return c == '\r' || c == '\n'; }
// ASCII that is neither white space, letter nor digit: punctuation and control characters.
inline bool IsAsciiOther(uint8_t c) {
  return c < 0x80 && !IsAsciiLetter(c) && !IsAsciiDigit(c) && !IsAsciiSpace(c);
}

}  // namespace

void TiktokenTokenizer::ClearThreadCache() {
  ThreadPieceCache().Reset(0);
}

TiktokenTokenizer::~TiktokenTokenizer() = default;

absl::StatusOr<std::unique_ptr<TiktokenTokenizer>> TiktokenTokenizer::Load(
    const std::string& path, const TiktokenOptions& options) {
  CCTUNE_ASSIGN_OR_RETURN(std::string contents, ReadTokenizerFile(path));
  return FromString(contents, path, options);
}

absl::StatusOr<std::unique_ptr<TiktokenTokenizer>> TiktokenTokenizer::FromString(
    std::string_view contents, std::string_view source, const TiktokenOptions& options) {
  std::unique_ptr<TiktokenTokenizer> tok(new TiktokenTokenizer());
  CCTUNE_RETURN_IF_ERROR(tok->Init(contents, source, options));
  return tok;
}

absl::Status TiktokenTokenizer::Init(std::string_view contents, std::string_view source_view,
                                     const TiktokenOptions& options) {
  const std::string source(source_view);
  struct Entry {
    uint32_t offset;
    uint32_t length;
    int64_t line;
    int64_t rank;
  };
  std::vector<Entry> entries;
  std::string bytes_arena;
  std::string decoded;
  int64_t line_no = 0;
  size_t pos = 0;
  while (pos < contents.size()) {
    size_t end = contents.find('\n', pos);
    if (end == std::string_view::npos) end = contents.size();
    std::string_view line = contents.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    if (space == std::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ":", line_no, ": expected '<base64 token> <rank>', got '", Shorten(line), "'"));
    }
    const std::string_view b64 = line.substr(0, space);
    const std::string_view rank_text = line.substr(space + 1);
    if (!DecodeBase64(b64, &decoded)) {
      return absl::InvalidArgumentError(absl::StrCat(source, ":", line_no, ": invalid base64 '",
                                                     Shorten(b64), "'"));
    }
    int64_t rank = 0;
    bool rank_ok = !rank_text.empty() && rank_text.size() <= 9;
    for (const char c : rank_text) {
      if (c < '0' || c > '9') {
        rank_ok = false;
        break;
      }
      rank = rank * 10 + (c - '0');
    }
    if (!rank_ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ":", line_no, ": rank '", Shorten(rank_text), "' is not a non-negative integer"));
    }
    if (bytes_arena.size() + decoded.size() > (uint64_t{1} << 31)) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": token bytes exceed 2 GiB"));
    }
    entries.push_back({static_cast<uint32_t>(bytes_arena.size()),
                       static_cast<uint32_t>(decoded.size()), line_no, rank});
    bytes_arena += decoded;
  }
  if (entries.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": no tokens"));
  }
  const int64_t n = static_cast<int64_t>(entries.size());
  // Ranks must be exactly 0..n-1: ids are ranks, and special tokens follow them.
  std::vector<int64_t> line_of_rank(n, 0);
  for (const Entry& e : entries) {
    if (e.rank >= n) {
      return absl::InvalidArgumentError(absl::StrCat(source, ":", e.line, ": rank ", e.rank,
                                                     " is out of range: the file has ", n,
                                                     " tokens, so ranks must be 0..", n - 1));
    }
    if (line_of_rank[e.rank] != 0) {
      return absl::InvalidArgumentError(absl::StrCat(source, ":", e.line, ": duplicate rank ",
                                                     e.rank, " (first on line ",
                                                     line_of_rank[e.rank], ")"));
    }
    line_of_rank[e.rank] = e.line;
  }
  std::vector<const Entry*> by_rank(n);
  for (const Entry& e : entries) by_rank[e.rank] = &e;
  num_base_tokens_ = static_cast<int32_t>(n);
  arena_.reserve(bytes_arena.size());
  offsets_.resize(n + 1);
  for (int64_t r = 0; r < n; ++r) {
    offsets_[r] = static_cast<uint32_t>(arena_.size());
    arena_.append(bytes_arena, by_rank[r]->offset, by_rank[r]->length);
  }
  offsets_[n] = static_cast<uint32_t>(arena_.size());

  // Open-addressing rank table at load factor <= 1/2.
  uint64_t capacity = 16;
  while (capacity < 2 * static_cast<uint64_t>(n)) capacity <<= 1;
  table_.assign(capacity, Slot{0, 0, -1});
  table_mask_ = capacity - 1;
  pair_rank_.assign(65536, -1);  // Lookup() answers 2-byte strings from here
  for (int32_t r = 0; r < num_base_tokens_; ++r) {
    const std::string_view b = TokenBytes(r);
    if (b.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ":", by_rank[r]->line, ": empty token (rank ", r, ")"));
    }
    const auto* p = reinterpret_cast<const uint8_t*>(b.data());
    const int32_t existing = Lookup(p, b.size());
    if (existing >= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ":", by_rank[r]->line, ": token '", Shorten(b),
                       "' duplicates rank ", existing, " (line ", by_rank[existing]->line, ")"));
    }
    const uint64_t head = LoadHead(p, b.size());
    uint64_t i = HashBytes(head, p, b.size()) & table_mask_;
    while (table_[i].rank >= 0) i = (i + 1) & table_mask_;
    table_[i] = Slot{head, static_cast<uint32_t>(b.size()), r};
    if (b.size() == 2) pair_rank_[(p[0] << 8) | p[1]] = r;
  }
  for (int b = 0; b < 256; ++b) {
    const uint8_t byte = static_cast<uint8_t>(b);
    byte_rank_[b] = Lookup(&byte, 1);
    if (byte_rank_[b] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": no token for the single byte 0x", absl::Hex(b, absl::kZeroPad2),
          "; byte-level BPE needs all 256"));
    }
  }


  // Special tokens.
  for (const std::string& s : options.special_tokens) {
    if (s.empty()) return absl::InvalidArgumentError("tiktoken: empty special token");
    const int32_t id = num_base_tokens_ + static_cast<int32_t>(special_tokens_.size());
    if (!special_ids_.emplace(s, id).second) {
      return absl::InvalidArgumentError(absl::StrCat("tiktoken: duplicate special token ", s));
    }
    special_tokens_.push_back(s);
    special_first_byte_[static_cast<uint8_t>(s[0])] = true;
    if (std::find(special_lengths_.begin(), special_lengths_.end(), s.size()) ==
        special_lengths_.end()) {
      special_lengths_.push_back(s.size());
    }
  }
  std::sort(special_lengths_.rbegin(), special_lengths_.rend());
  auto find_special = [&](const std::string& name, const char* what,
                          int32_t* id) -> absl::Status {
    if (name.empty()) return absl::OkStatus();
    const std::optional<int32_t> found = SpecialTokenId(name);
    if (!found.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tiktoken: ", what, " token ", name, " is not a special token"));
    }
    *id = *found;
    return absl::OkStatus();
  };
  CCTUNE_RETURN_IF_ERROR(find_special(options.bos_token, "bos", &bos_id_));
  CCTUNE_RETURN_IF_ERROR(find_special(options.eos_token, "eos", &eos_id_));
  CCTUNE_RETURN_IF_ERROR(find_special(options.pad_token, "pad", &pad_id_));
  for (const std::string& s : options.stop_tokens) {
    int32_t id = -1;
    CCTUNE_RETURN_IF_ERROR(find_special(s, "stop", &id));
    stop_tokens_.push_back(id);
  }

  // The pre-tokenisation regex.
  CCTUNE_ASSIGN_OR_RETURN(regex_, Pcre2Splitter::Compile(options.pattern, "tiktoken"));
  ascii_fast_path_ = options.pattern == kLlama3Pattern;
  instance_id_ = next_instance_id.fetch_add(1);
  return absl::OkStatus();
}

int32_t TiktokenTokenizer::Lookup(const uint8_t* p, size_t n) const {
  // Most lookups during merging are of two bytes: a direct table answers them from cache.
  if (n == 2) return pair_rank_[(p[0] << 8) | p[1]];
  const uint64_t head = LoadHead(p, n);
  uint64_t i = HashBytes(head, p, n) & table_mask_;
  while (true) {
    const Slot& s = table_[i];
    if (s.rank < 0) return -1;
    if (s.head == head && s.length == n &&
        (n <= 8 || std::memcmp(arena_.data() + offsets_[s.rank] + 8, p + 8, n - 8) == 0)) {
      return s.rank;
    }
    i = (i + 1) & table_mask_;
  }
}

std::optional<int32_t> TiktokenTokenizer::SpecialTokenId(std::string_view token) const {
  const auto it = special_ids_.find(AbslView(token));
  if (it == special_ids_.end()) return std::nullopt;
  return it->second;
}

// tiktoken's merge: parts are delimited by boundaries; rank[i] is the rank of the bytes
// spanning parts i and i+1. Merge the lowest (leftmost on ties) until nothing merges.
void TiktokenTokenizer::MergeLinear(const uint8_t* p, size_t n, std::vector<int32_t>* ids) const {
  constexpr int32_t kNone = INT32_MAX;
  uint32_t bound[kLinearMergeMax + 1];  // part i is [bound[i], bound[i + 1])
  int32_t pair_rank[kLinearMergeMax];
  int32_t part_rank[kLinearMergeMax];
  size_t m = n;  // number of parts
  for (size_t i = 0; i <= n; ++i) bound[i] = static_cast<uint32_t>(i);
  for (size_t i = 0; i < n; ++i) part_rank[i] = byte_rank_[p[i]];
  for (size_t i = 0; i + 1 < n; ++i) {
    const int32_t r = Lookup(p + i, 2);
    pair_rank[i] = r < 0 ? kNone : r;
  }
  auto span_rank = [&](size_t first, size_t last_bound) {
    const int32_t r = Lookup(p + bound[first], bound[last_bound] - bound[first]);
    return r < 0 ? kNone : r;
  };
  while (m > 1) {
    int32_t best = kNone;
    size_t at = 0;
    for (size_t i = 0; i + 1 < m; ++i) {
      if (pair_rank[i] < best) {
        best = pair_rank[i];
        at = i;
      }
    }
    if (best == kNone) break;
    // Join parts at and at+1.
    part_rank[at] = best;
    for (size_t i = at + 1; i + 1 < m; ++i) {
      part_rank[i] = part_rank[i + 1];
      pair_rank[i] = pair_rank[i + 1];
    }
    for (size_t i = at + 1; i < m; ++i) bound[i] = bound[i + 1];
    --m;
    if (at + 1 < m) pair_rank[at] = span_rank(at, at + 2);
    if (at > 0) pair_rank[at - 1] = span_rank(at - 1, at + 1);
  }
  ids->insert(ids->end(), part_rank, part_rank + m);
}

// The same merge order in O(n log n): a linked list of parts and a heap of candidate pairs
// ordered by (rank, position); entries made stale by a merge are skipped when popped.
void TiktokenTokenizer::MergeHeap(const uint8_t* p, size_t n, std::vector<int32_t>* ids) const {
  struct Candidate {
    int32_t rank;
    uint32_t left;
    uint32_t left_end;   // the left part's end when pushed
    uint32_t right_end;  // the right part's end when pushed
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  // Parts are identified by their start byte.
  std::vector<uint32_t> end(n), prev(n);
  std::vector<int32_t> part_rank(n);
  std::vector<uint8_t> alive(n, 1);
  for (size_t i = 0; i < n; ++i) {
    end[i] = static_cast<uint32_t>(i + 1);
    prev[i] = static_cast<uint32_t>(i) - 1;  // wraps for i == 0: unused
    part_rank[i] = byte_rank_[p[i]];
  }
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto push = [&](uint32_t left) {
    const uint32_t right = end[left];
    if (right >= n) return;
    const int32_t r = Lookup(p + left, end[right] - left);
    if (r >= 0) heap.push(Candidate{r, left, right, end[right]});
  };
  for (uint32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const uint32_t right = c.left_end;
    if (!alive[c.left] || end[c.left] != c.left_end || right >= n || !alive[right] ||
        end[right] != c.right_end) {
      continue;  // stale
    }
    part_rank[c.left] = c.rank;
    end[c.left] = end[right];
    alive[right] = 0;
    if (end[c.left] < n) prev[end[c.left]] = c.left;
    if (c.left > 0) push(prev[c.left]);
    push(c.left);
  }
  for (uint32_t i = 0; i < n; i = end[i]) ids->push_back(part_rank[i]);
}

void TiktokenTokenizer::BytePairEncode(std::string_view piece, bool force_heap,
                                       std::vector<int32_t>* ids) const {
  const auto* p = reinterpret_cast<const uint8_t*>(piece.data());
  if (piece.empty()) return;
  if (force_heap) {
    MergeHeap(p, piece.size(), ids);
  } else if (piece.size() <= kLinearMergeMax) {
    MergeLinear(p, piece.size(), ids);
  } else {
    MergeHeap(p, piece.size(), ids);
  }
}

void TiktokenTokenizer::EncodePiece(const uint8_t* p, size_t n, PieceCache& cache,
                                    std::vector<int32_t>* ids) const {
  if (n == 1) {
    ids->push_back(byte_rank_[p[0]]);
    return;
  }
  const int32_t whole = Lookup(p, n);
  if (whole >= 0) {
    ids->push_back(whole);
    return;
  }
  if (n > kMaxCachedPiece) {
    n <= kLinearMergeMax ? MergeLinear(p, n, ids) : MergeHeap(p, n, ids);
    return;
  }
  if (cache.spans.size() >= kMaxCacheEntries) {
    cache.spans.clear();
    cache.ids.clear();
  }
  const absl::string_view key(reinterpret_cast<const char*>(p), n);
  const auto it = cache.spans.find(key);
  if (it != cache.spans.end()) {
    const int32_t* begin = cache.ids.data() + it->second.first;
    ids->insert(ids->end(), begin, begin + it->second.second);
    return;
  }
  const size_t before = ids->size();
  MergeLinear(p, n, ids);
  const uint32_t start = static_cast<uint32_t>(cache.ids.size());
  cache.ids.insert(cache.ids.end(), ids->begin() + before, ids->end());
  cache.spans.emplace(key, std::make_pair(start, static_cast<uint32_t>(ids->size() - before)));
}

size_t TiktokenTokenizer::MatchAscii(std::string_view text, size_t pos) const {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  const uint8_t c = s[pos];
  if (c >= 0x80) return 0;
  auto at = [&](size_t i) -> int { return i < n ? s[i] : -1; };  // -1: end of text
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)
  if (c == '\'') {
    const int c1 = at(pos + 1);
    if (c1 >= 0x80) return 0;  // could be U+017F, which folds to 's'
    const int l1 = c1 | 0x20;
    if (c1 >= 0 && (l1 == 's' || l1 == 't' || l1 == 'm' || l1 == 'd')) return 2;
    const int l2 = at(pos + 2) | 0x20;
    if (c1 >= 0 && at(pos + 2) >= 0) {
      if ((l1 == 'r' || l1 == 'v') && l2 == 'e') return 3;
      if (l1 == 'l' && l2 == 'l') return 3;
    }
  }
  // [^\r\n\p{L}\p{N}]?\p{L}+
  auto letters_from = [&](size_t i) -> size_t {  // end of the letter run, or 0 if undecided
    while (i < n && IsAsciiLetter(s[i])) ++i;
    if (i < n && s[i] >= 0x80) return 0;
    return i;
  };
  if (IsAsciiLetter(c)) {
    const size_t e = letters_from(pos);
    return e == 0 ? 0 : e - pos;
  }
  if (!IsCrLf(c) && !IsAsciiDigit(c)) {
    const int c1 = at(pos + 1);
    if (c1 >= 0x80) return 0;
    if (c1 >= 0 && IsAsciiLetter(static_cast<uint8_t>(c1))) {
      const size_t e = letters_from(pos + 1);
      return e == 0 ? 0 : e - pos;
    }
  }
  // \p{N}{1,3}
  if (IsAsciiDigit(c)) {
    size_t i = pos;
    while (i < n && i - pos < 3 && IsAsciiDigit(s[i])) ++i;
    if (i - pos < 3 && i < n && s[i] >= 0x80) return 0;
    return i - pos;
  }
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  {
    const size_t q = c == ' ' ? pos + 1 : pos;
    const int cq = at(q);
    if (cq >= 0x80) return 0;
    if (cq >= 0 && IsAsciiOther(static_cast<uint8_t>(cq))) {
      size_t i = q;
      while (i < n && IsAsciiOther(s[i])) ++i;
      if (i < n && s[i] >= 0x80) return 0;
      while (i < n && IsCrLf(s[i])) ++i;
      return i - pos;
    }
  }
  // White space: \s*[\r\n]+ | \s+(?!\S) | \s+
  if (IsAsciiSpace(c)) {
    size_t q = pos;
    size_t last_newline = SIZE_MAX;
    while (q < n && IsAsciiSpace(s[q])) {
      if (IsCrLf(s[q])) last_newline = q;
      ++q;
    }
    if (q < n && s[q] >= 0x80) return 0;  // may be more (Unicode) white space
    if (last_newline != SIZE_MAX) return last_newline + 1 - pos;
    if (q == n) return q - pos;
    if (q - 1 > pos) return q - 1 - pos;
    return 1;
  }
  return 0;
}

template <typename Fn>
void TiktokenTokenizer::ForEachPiece(std::string_view text, bool use_fast_path,
                                     Fn&& fn) const {
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t len = use_fast_path ? MatchAscii(text, pos) : 0;
    if (len > 0) {
      fn(pos, len);
      pos += len;
      continue;
    }
    size_t start = 0, end = 0;
    switch (regex_->Next(text, pos, &start, &end)) {
      case Pcre2Splitter::Match::kNone:
        return;  // tiktoken drops text the pattern does not match
      case Pcre2Splitter::Match::kError:
        // A PCRE2 resource limit on pathological input: encode the next character alone
        // rather than lose or abort.
        start = pos;
        end = pos + std::max<size_t>(1, Utf8SequenceLength(text.substr(pos)));
        break;
      case Pcre2Splitter::Match::kFound:
        break;
    }
    if (end == start) {  // an empty match (custom patterns): step over one character
      pos = start + std::max<size_t>(1, Utf8SequenceLength(text.substr(start)));
      continue;
    }
    fn(start, end - start);
    pos = end;
  }
}

std::vector<std::string_view> TiktokenTokenizer::PreTokenize(std::string_view text,
                                                             bool use_fast_path) const {
  std::vector<std::string_view> pieces;
  ForEachPiece(text, use_fast_path && ascii_fast_path_,
               [&](size_t start, size_t len) { pieces.push_back(text.substr(start, len)); });
  return pieces;
}

void TiktokenTokenizer::EncodeOrdinary(std::string_view text, std::vector<int32_t>* ids) const {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  PieceCache& cache = ThreadPieceCache();
  if (cache.owner != instance_id_) cache.Reset(instance_id_);
  ForEachPiece(text, ascii_fast_path_,
               [&](size_t start, size_t len) { EncodePiece(s + start, len, cache, ids); });
}

void TiktokenTokenizer::EncodeAppend(std::string_view text, const EncodeOptions& options,
                                     std::vector<int32_t>* ids) const {
  if (options.add_bos) ids->push_back(bos_id_);
  std::string repaired;
  if (!IsValidUtf8(text)) {
    repaired = ReplaceInvalidUtf8(text);
    text = repaired;
  }
  if (!options.parse_special || special_tokens_.empty()) {
    EncodeOrdinary(text, ids);
  } else {
    size_t start = 0;
    size_t i = 0;
    while (i < text.size()) {
      if (special_first_byte_[static_cast<uint8_t>(text[i])]) {
        bool matched = false;
        for (const size_t len : special_lengths_) {
          if (i + len > text.size()) continue;
          const auto it = special_ids_.find(AbslView(text.substr(i, len)));
          if (it != special_ids_.end()) {
            EncodeOrdinary(text.substr(start, i - start), ids);
            ids->push_back(it->second);
            i += len;
            start = i;
            matched = true;
            break;
          }
        }
        if (matched) continue;
      }
      ++i;
    }
    EncodeOrdinary(text.substr(start), ids);
  }
  if (options.add_eos) ids->push_back(eos_id_);
}

absl::StatusOr<std::string> TiktokenTokenizer::Decode(absl::Span<const int32_t> ids) const {
  std::string bytes;
  for (const int32_t id : ids) {
    CCTUNE_RETURN_IF_ERROR(CheckTokenId(id, vocab_size(), "tiktoken Decode"));
    if (id < num_base_tokens_) {
      const std::string_view b = TokenBytes(id);
      bytes.append(b.data(), b.size());
    } else {
      bytes += special_tokens_[id - num_base_tokens_];
    }
  }
  if (IsValidUtf8(bytes)) return bytes;
  return ReplaceInvalidUtf8(bytes);
}

absl::StatusOr<std::string> TiktokenTokenizer::DecodePiece(int32_t id, int32_t prev_id) const {
  CCTUNE_RETURN_IF_ERROR(CheckTokenId(id, vocab_size(), "tiktoken DecodePiece"));
  if (id < num_base_tokens_) return std::string(TokenBytes(id));
  return special_tokens_[id - num_base_tokens_];
}

absl::StatusOr<std::unique_ptr<Tokenizer>> MakeLlama3Tokenizer(const std::string& path) {
  CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<TiktokenTokenizer> tok,
                          TiktokenTokenizer::Load(path, Llama3TiktokenOptions()));
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

}  // namespace cctune
