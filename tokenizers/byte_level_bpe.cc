#include "tokenizers/byte_level_bpe.h"

#include <algorithm>
#include <mutex>
#include <queue>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/status.h"
#include "nlohmann/json.hpp"
#include "tokenizers/nfc.h"
#include "tokenizers/utf8.h"

namespace cctune {

const char kQwen2Pattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace internal {

// Merged pieces, shared by all threads (short critical sections: one lookup or insert).
struct BpeCache {
  static constexpr size_t kMaxPieceBytes = 256;
  size_t max_entries = 0;
  std::mutex mu;
  absl::flat_hash_map<std::string, std::vector<int32_t>> pieces;
};

}  // namespace internal

namespace {

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes map to themselves, the other 68 bytes
// to U+0100 onwards, in byte order.
struct ByteUnicodeTables {
  uint32_t byte_to_cp[256];
  int16_t cp_to_byte[324];  // -1: not a byte's code point
  ByteUnicodeTables() {
    std::fill(std::begin(cp_to_byte), std::end(cp_to_byte), -1);
    uint32_t extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      byte_to_cp[b] = printable ? b : 256 + extra++;
      cp_to_byte[byte_to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteUnicodeTables& Tables() {
  static const ByteUnicodeTables* const t = new ByteUnicodeTables();
  return *t;
}

// The raw bytes of a byte-level token string (UTF-8 of byte_to_cp code points); false when a
// code point is not one of them.
bool ByteLevelToBytes(std::string_view s, std::string* out) {
  const ByteUnicodeTables& t = Tables();
  out->clear();
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t c = static_cast<uint8_t>(s[i]);
    uint32_t cp;
    if (c < 0x80) {
      cp = c;
      i += 1;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < s.size()) {
      cp = ((c & 0x1F) << 6) | (static_cast<uint8_t>(s[i + 1]) & 0x3F);
      i += 2;
    } else {
      return false;  // every byte's code point is below U+0800
    }
    if (cp >= 324 || t.cp_to_byte[cp] < 0) return false;
    out->push_back(static_cast<char>(t.cp_to_byte[cp]));
  }
  return !out->empty();
}

absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::string Shown(std::string_view s) {
  std::string shown = absl::CHexEscape(absl::string_view(s.data(), std::min<size_t>(s.size(), 40)));
  if (s.size() > 40) shown += "...";
  return shown;
}

}  // namespace

std::vector<std::pair<std::string, int32_t>> Qwen2_5SpecialTokens() {
  static const char* const kTokens[] = {
      "<|endoftext|>",  "<|im_start|>",   "<|im_end|>",       "<|object_ref_start|>",
      "<|object_ref_end|>", "<|box_start|>", "<|box_end|>",   "<|quad_start|>",
      "<|quad_end|>",   "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
      "<|image_pad|>",  "<|video_pad|>",  "<tool_call>",      "</tool_call>",
      "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",   "<|fim_pad|>",
      "<|repo_name|>",  "<|file_sep|>",
  };
  std::vector<std::pair<std::string, int32_t>> out;
  int32_t id = 151643;
  for (const char* t : kTokens) out.emplace_back(t, id++);
  return out;
}

absl::StatusOr<std::vector<std::pair<std::string, int32_t>>> ReadHfSpecialTokens(
    const std::string& path) {
  CCTUNE_ASSIGN_OR_RETURN(std::string contents, ReadTokenizerFile(path));
  const nlohmann::json j = nlohmann::json::parse(contents, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("special_tokens_path '", path,
                                                   "' is not a JSON object (a tokenizer.json)"));
  }
  auto added = j.find("added_tokens");
  if (added == j.end() || !added->is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat("special_tokens_path '", path, "' has no \"added_tokens\" list"));
  }
  std::vector<std::pair<std::string, int32_t>> out;
  for (size_t i = 0; i < added->size(); ++i) {
    const nlohmann::json& t = (*added)[i];
    if (!t.is_object() || !t.contains("content") || !t["content"].is_string() ||
        !t.contains("id") || !t["id"].is_number_integer() || t["id"].get<int64_t>() < 0 ||
        t["id"].get<int64_t>() >= (int64_t{1} << 24)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "special_tokens_path '", path, "': added_tokens[", i,
          "] needs a string \"content\" and an \"id\" in [0, 2^24)"));
    }
    out.emplace_back(t["content"].get<std::string>(), t["id"].get<int32_t>());
  }
  return out;
}

ByteLevelBpeTokenizer::ByteLevelBpeTokenizer() : cache_(new internal::BpeCache()) {}
ByteLevelBpeTokenizer::~ByteLevelBpeTokenizer() = default;

absl::StatusOr<std::unique_ptr<ByteLevelBpeTokenizer>> ByteLevelBpeTokenizer::Load(
    const std::string& vocab_path, const std::string& merges_path,
    const ByteLevelBpeOptions& options) {
  CCTUNE_ASSIGN_OR_RETURN(std::string vocab, ReadTokenizerFile(vocab_path));
  CCTUNE_ASSIGN_OR_RETURN(std::string merges, ReadTokenizerFile(merges_path));
  return FromStrings(vocab, vocab_path, merges, merges_path, options);
}

absl::StatusOr<std::unique_ptr<ByteLevelBpeTokenizer>> ByteLevelBpeTokenizer::FromStrings(
    std::string_view vocab_json, std::string_view vocab_name, std::string_view merges_txt,
    std::string_view merges_name, const ByteLevelBpeOptions& options) {
  std::unique_ptr<ByteLevelBpeTokenizer> tok(new ByteLevelBpeTokenizer());
  CCTUNE_RETURN_IF_ERROR(tok->Init(vocab_json, vocab_name, merges_txt, merges_name, options));
  return tok;
}

absl::Status ByteLevelBpeTokenizer::Init(std::string_view vocab_json, std::string_view vocab_name,
                                         std::string_view merges_txt,
                                         std::string_view merges_name,
                                         const ByteLevelBpeOptions& options) {
  // vocab.json: {"token": id, ...}.
  const nlohmann::json j = nlohmann::json::parse(vocab_json.begin(), vocab_json.end(), nullptr,
                                                 /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || j.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocab file '", AV(vocab_name), "' is not a non-empty JSON object"));
  }
  constexpr int64_t kMaxId = int64_t{1} << 24;
  std::string bytes;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() >= kMaxId) {
      return absl::InvalidArgumentError(absl::StrCat("vocab file '", AV(vocab_name), "': token '",
                                                     Shown(it.key()),
                                                     "' needs an integer id in [0, 2^24)"));
    }
    const int32_t id = it.value().get<int32_t>();
    if (!ByteLevelToBytes(it.key(), &bytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat("vocab file '", AV(vocab_name), "': token '", Shown(it.key()), "' (id ", id,
                       ") is not byte-level BPE text (GPT-2's byte-to-unicode alphabet)"));
    }
    if (static_cast<size_t>(id) >= token_bytes_.size()) {
      token_bytes_.resize(id + 1);
      is_vocab_.resize(id + 1, 0);
    }
    if (is_vocab_[id]) {
      return absl::InvalidArgumentError(
          absl::StrCat("vocab file '", AV(vocab_name), "': id ", id, " is given twice"));
    }
    if (!vocab_.emplace(bytes, id).second) {
      return absl::InvalidArgumentError(absl::StrCat("vocab file '", AV(vocab_name), "': token '",
                                                     Shown(it.key()), "' is given twice"));
    }
    token_bytes_[id] = bytes;
    is_vocab_[id] = 1;
  }
  for (int b = 0; b < 256; ++b) {
    auto it = vocab_.find(std::string(1, static_cast<char>(b)));
    if (it == vocab_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "vocab file '", AV(vocab_name), "' has no token for byte 0x", absl::Hex(b, absl::kZeroPad2),
          " (a byte-level vocabulary holds all 256)"));
    }
    byte_id_[b] = it->second;
  }

  // merges.txt: "left right" per line, ranked by order; a first "#version:" line is skipped.
  int32_t rank = 0;
  size_t line_no = 0;
  std::string left, right;
  for (size_t pos = 0; pos <= merges_txt.size();) {
    size_t nl = merges_txt.find('\n', pos);
    if (nl == std::string_view::npos) nl = merges_txt.size();
    ++line_no;
    const absl::string_view stripped =
        absl::StripAsciiWhitespace(absl::string_view(merges_txt.data() + pos, nl - pos));
    const std::string_view line(stripped.data(), stripped.size());
    pos = nl + 1;
    if (line.empty() || (line_no == 1 && absl::StartsWith(stripped, "#version:"))) continue;
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("merges file '", AV(merges_name), "' line ",
                                                     line_no, ": '", Shown(line),
                                                     "' is not two tokens separated by a space"));
    }
    if (!ByteLevelToBytes(line.substr(0, space), &left) ||
        !ByteLevelToBytes(line.substr(space + 1), &right)) {
      return absl::InvalidArgumentError(absl::StrCat("merges file '", AV(merges_name), "' line ",
                                                     line_no, ": '", Shown(line),
                                                     "' is not byte-level BPE text"));
    }
    auto l = vocab_.find(left);
    auto r = vocab_.find(right);
    auto m = vocab_.find(left + right);
    if (l == vocab_.end() || r == vocab_.end() || m == vocab_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "merges file '", AV(merges_name), "' line ", line_no, ": '", Shown(line), "': ",
          l == vocab_.end() ? "its left token" : r == vocab_.end() ? "its right token"
                                                                   : "the merged token",
          " is not in the vocabulary ('", AV(vocab_name), "')"));
    }
    // A repeated merge takes its later rank (torchtune's dict(zip(merges, range(...)))).
    merges_.insert_or_assign(
        (static_cast<uint64_t>(static_cast<uint32_t>(l->second)) << 32) |
            static_cast<uint32_t>(r->second),
        MergeRule{rank++, m->second});
  }

  // Special tokens.
  vocab_size_ = static_cast<int32_t>(token_bytes_.size());
  int32_t lo = -1, hi = -1;
  for (const auto& [text, id] : options.special_tokens) {
    if (text.empty() || id < 0 || id >= kMaxId) {
      return absl::InvalidArgumentError(absl::StrCat("special token '", Shown(text), "' (id ", id,
                                                     ") needs text and an id in [0, 2^24)"));
    }
    if (static_cast<size_t>(id) < is_vocab_.size() && is_vocab_[id]) {
      return absl::InvalidArgumentError(
          absl::StrCat("special token '", Shown(text), "' has id ", id, ", which the vocab file '",
                       AV(vocab_name), "' already gives to another token"));
    }
    lo = lo < 0 ? id : std::min(lo, id);
    hi = std::max(hi, id);
  }
  first_special_id_ = lo;
  if (lo >= 0) {
    special_text_.assign(hi - lo + 1, std::string());
    for (const auto& [text, id] : options.special_tokens) {
      if (!special_text_[id - lo].empty() || !special_ids_.emplace(text, id).second) {
        return absl::InvalidArgumentError(absl::StrCat("special token '", Shown(text), "' (id ",
                                                       id, ") is given twice"));
      }
      special_text_[id - lo] = text;
      special_first_byte_[static_cast<uint8_t>(text[0])] = true;
      if (std::find(special_lengths_.begin(), special_lengths_.end(), text.size()) ==
          special_lengths_.end()) {
        special_lengths_.push_back(text.size());
      }
    }
    std::sort(special_lengths_.rbegin(), special_lengths_.rend());
    vocab_size_ = std::max(vocab_size_, hi + 1);
  }
  auto named = [&](const std::string& name, const char* role, int32_t* out) -> absl::Status {
    if (name.empty()) return absl::OkStatus();
    auto it = special_ids_.find(name);
    if (it == special_ids_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(role, " token '", name, "' is not one of the special tokens"));
    }
    *out = it->second;
    return absl::OkStatus();
  };
  CCTUNE_RETURN_IF_ERROR(named(options.bos_token, "bos", &bos_id_));
  CCTUNE_RETURN_IF_ERROR(named(options.eos_token, "eos", &eos_id_));
  CCTUNE_RETURN_IF_ERROR(named(options.pad_token, "pad", &pad_id_));
  for (const std::string& s : options.stop_tokens) {
    int32_t id = -1;
    CCTUNE_RETURN_IF_ERROR(named(s, "stop", &id));
    if (std::find(stop_tokens_.begin(), stop_tokens_.end(), id) == stop_tokens_.end()) {
      stop_tokens_.push_back(id);
    }
  }
  nfc_ = options.nfc;
  cache_->max_entries = options.cache_entries;
  CCTUNE_ASSIGN_OR_RETURN(splitter_, Pcre2Splitter::Compile(options.pattern, vocab_name));
  return absl::OkStatus();
}

std::optional<int32_t> ByteLevelBpeTokenizer::SpecialTokenId(std::string_view token) const {
  auto it = special_ids_.find(AV(token));
  if (it == special_ids_.end()) return std::nullopt;
  return it->second;
}

void ByteLevelBpeTokenizer::MergeBytes(std::string_view bytes, std::vector<int32_t>* ids) const {
  const size_t n = bytes.size();
  struct Sym {
    int32_t id, prev, next;
  };
  std::vector<Sym> sym(n);
  for (size_t i = 0; i < n; ++i) {
    sym[i] = {byte_id_[static_cast<uint8_t>(bytes[i])], static_cast<int32_t>(i) - 1,
              i + 1 < n ? static_cast<int32_t>(i + 1) : -1};
  }
  // Candidates: (rank, left position) smallest first, so ties go to the leftmost pair; an
  // entry is stale once either symbol changed.
  struct Cand {
    int32_t rank, pos, left, right;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> queue;
  auto push = [&](int32_t pos) {
    if (pos < 0 || sym[pos].next < 0) return;
    const MergeRule* m = FindMerge(sym[pos].id, sym[sym[pos].next].id);
    if (m != nullptr) queue.push({m->rank, pos, sym[pos].id, sym[sym[pos].next].id});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int32_t>(i));
  while (!queue.empty()) {
    const Cand c = queue.top();
    queue.pop();
    Sym& a = sym[c.pos];
    if (a.id != c.left || a.next < 0 || sym[a.next].id != c.right) continue;
    const int32_t b = a.next;
    a.id = FindMerge(c.left, c.right)->result;
    a.next = sym[b].next;
    if (a.next >= 0) sym[a.next].prev = c.pos;
    sym[b].id = -1;
    push(a.prev);
    push(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) ids->push_back(sym[i].id);
}

void ByteLevelBpeTokenizer::EncodePiece(std::string_view bytes, std::vector<int32_t>* ids) const {
  if (bytes.empty()) return;
  if (bytes.size() == 1) {
    ids->push_back(byte_id_[static_cast<uint8_t>(bytes[0])]);
    return;
  }
  if (bytes.size() == 2) {
    const MergeRule* m = FindMerge(byte_id_[static_cast<uint8_t>(bytes[0])],
                                      byte_id_[static_cast<uint8_t>(bytes[1])]);
    if (m != nullptr) {
      ids->push_back(m->result);
    } else {
      ids->push_back(byte_id_[static_cast<uint8_t>(bytes[0])]);
      ids->push_back(byte_id_[static_cast<uint8_t>(bytes[1])]);
    }
    return;
  }
  const bool cacheable =
      cache_->max_entries > 0 && bytes.size() <= internal::BpeCache::kMaxPieceBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_->mu);
    auto it = cache_->pieces.find(AV(bytes));
    if (it != cache_->pieces.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t begin = ids->size();
  MergeBytes(bytes, ids);
  if (cacheable) {
    std::vector<int32_t> merged(ids->begin() + begin, ids->end());
    std::lock_guard<std::mutex> lock(cache_->mu);
    if (cache_->pieces.size() >= cache_->max_entries) cache_->pieces.clear();
    cache_->pieces.emplace(std::string(bytes), std::move(merged));
  }
}

void ByteLevelBpeTokenizer::EncodeOrdinary(std::string_view text,
                                           std::vector<int32_t>* ids) const {
  splitter_->ForEach(text, [&](size_t start, size_t length) {
    EncodePiece(text.substr(start, length), ids);
  });
}

std::vector<std::string> ByteLevelBpeTokenizer::PreTokenize(std::string_view text) const {
  std::vector<std::string> pieces;
  splitter_->ForEach(text, [&](size_t start, size_t length) {
    pieces.emplace_back(text.substr(start, length));
  });
  return pieces;
}

void ByteLevelBpeTokenizer::EncodeAppend(std::string_view text, const EncodeOptions& options,
                                         std::vector<int32_t>* ids) const {
  if (options.add_bos && bos_id_ >= 0) ids->push_back(bos_id_);
  std::string valid;
  if (!IsValidUtf8(text)) {
    valid = ReplaceInvalidUtf8(text);
    text = valid;
  }
  std::string normalized;
  if (nfc_) {
    normalized = NormalizeNfc(text);
    text = normalized;
  }
  // Special tokens split the text first (leftmost, longest), as torchtune's encode does.
  size_t plain_start = 0;
  for (size_t i = 0; i < text.size() && !special_ids_.empty(); ++i) {
    if (!special_first_byte_[static_cast<uint8_t>(text[i])]) continue;
    for (size_t len : special_lengths_) {
      if (i + len > text.size()) continue;
      auto it = special_ids_.find(AV(text.substr(i, len)));
      if (it == special_ids_.end()) continue;
      EncodeOrdinary(text.substr(plain_start, i - plain_start), ids);
      ids->push_back(it->second);
      i += len - 1;
      plain_start = i + 1;
      break;
    }
  }
  EncodeOrdinary(text.substr(plain_start), ids);
  if (options.add_eos && eos_id_ >= 0) ids->push_back(eos_id_);
}

absl::StatusOr<std::string> ByteLevelBpeTokenizer::Decode(absl::Span<const int32_t> ids) const {
  std::string out, run;
  for (int32_t id : ids) {
    CCTUNE_RETURN_IF_ERROR(CheckTokenId(id, vocab_size_, "byte-level BPE decode"));
    if (first_special_id_ >= 0 && id >= first_special_id_ &&
        !special_text_[id - first_special_id_].empty()) {
      AppendReplacingInvalidUtf8(run, &out);
      run.clear();
      out += special_text_[id - first_special_id_];
    } else if (static_cast<size_t>(id) < is_vocab_.size() && is_vocab_[id]) {
      run += token_bytes_[id];
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "byte-level BPE decode: id ", id, " is neither a vocabulary nor a special token"));
    }
  }
  AppendReplacingInvalidUtf8(run, &out);
  return out;
}

absl::StatusOr<std::string> ByteLevelBpeTokenizer::DecodePiece(int32_t id, int32_t prev_id) const {
  CCTUNE_RETURN_IF_ERROR(CheckTokenId(id, vocab_size_, "byte-level BPE decode"));
  if (first_special_id_ >= 0 && id >= first_special_id_ &&
      !special_text_[id - first_special_id_].empty()) {
    return special_text_[id - first_special_id_];
  }
  if (static_cast<size_t>(id) < is_vocab_.size() && is_vocab_[id]) return token_bytes_[id];
  return absl::InvalidArgumentError(absl::StrCat(
      "byte-level BPE decode: id ", id, " is neither a vocabulary nor a special token"));
}

ByteLevelBpeOptions Qwen2_5Options() {
  ByteLevelBpeOptions options;
  options.pattern = kQwen2Pattern;
  options.nfc = true;
  options.special_tokens = Qwen2_5SpecialTokens();
  options.eos_token = "<|im_end|>";
  options.pad_token = "<|endoftext|>";
  // torchtune's stop_tokens: [eos_id, im_end_id].
  options.stop_tokens = {"<|im_end|>"};
  return options;
}

absl::StatusOr<std::unique_ptr<ByteLevelBpeTokenizer>> MakeQwen2_5Tokenizer(
    const std::string& vocab_path, const std::string& merges_path,
    const std::string& special_tokens_path) {
  ByteLevelBpeOptions options = Qwen2_5Options();
  if (!special_tokens_path.empty()) {
    CCTUNE_ASSIGN_OR_RETURN(options.special_tokens, ReadHfSpecialTokens(special_tokens_path));
  }
  return ByteLevelBpeTokenizer::Load(vocab_path, merges_path, options);
}

}  // namespace cctune
