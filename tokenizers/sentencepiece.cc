#include "tokenizers/sentencepiece.h"

#include <algorithm>
#include <limits>
#include <queue>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "tokenizers/sentencepiece_model.h"
#include "tokenizers/utf8.h"

namespace cctune {
namespace {

using PieceType = SentencePieceModel::PieceType;

constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81";  // U+2581, SentencePiece's "▁"
constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";
// Unigram: an unknown character scores this much below the worst piece (SentencePiece's).
constexpr float kUnkPenalty = 10.0f;

// Bytes of the UTF-8 character that starts with `lead`, from the lead byte alone (as
// SentencePiece's OneCharLen); the text is valid UTF-8 by the time this is used.
inline size_t OneCharLen(char lead) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[static_cast<uint8_t>(lead) >> 4];
}

// One encoded segment: its text and id, before byte fallback and unknown merging.
struct Segment {
  std::string_view piece;
  int32_t id;
};

}  // namespace

struct SentencePieceTokenizer::Model {
  SentencePieceModel proto;
  // SentencePiece's two maps: pieces that take part in segmentation (normal, user-defined,
  // unused), and the reserved ones (control, unknown, byte).
  absl::flat_hash_map<std::string_view, int32_t> pieces;
  absl::flat_hash_map<std::string_view, int32_t> reserved;
  absl::flat_hash_set<std::string_view> user_defined;
  size_t max_user_defined_len = 0;
  size_t max_piece_len = 0;
  int32_t unk_id = -1;
  int32_t byte_ids[256] = {};
  float min_score = 0.0f;  // Unigram: over NORMAL pieces
  float max_score = 0.0f;

  PieceType type(int32_t id) const { return proto.pieces[id].type; }
  bool IsControl(int32_t id) const { return type(id) == PieceType::kControl; }
  bool IsUnknown(int32_t id) const { return type(id) == PieceType::kUnknown; }
  bool IsByte(int32_t id) const { return type(id) == PieceType::kByte; }

  int32_t PieceToId(std::string_view piece) const {
    if (auto it = reserved.find(piece); it != reserved.end()) return it->second;
    if (auto it = pieces.find(piece); it != pieces.end()) return it->second;
    return unk_id;
  }

  // Length of the longest user-defined piece that starts `text` (*found), else of its first
  // character.
  size_t PrefixMatch(std::string_view text, bool* found) const {
    *found = false;
    for (size_t n = std::min(max_user_defined_len, text.size()); n > 0; --n) {
      if (user_defined.contains(text.substr(0, n))) {
        *found = true;
        return n;
      }
    }
    return std::min(text.size(), OneCharLen(text[0]));
  }

  std::string Normalize(std::string_view input) const;
  void EncodeBpe(std::string_view normalized, std::vector<Segment>* out) const;
  void EncodeUnigram(std::string_view normalized, std::vector<Segment>* out) const;
};

// SentencePiece's Normalizer with an identity charsmap: optional removal of leading, trailing
// and repeated spaces, the dummy-prefix "▁", and " " escaped to "▁". User-defined pieces pass
// through whole.
std::string SentencePieceTokenizer::Model::Normalize(std::string_view input) const {
  std::string out;
  const SentencePieceModel& spec = proto;
  auto next = [this](std::string_view s) {
    bool found;
    return s.substr(0, PrefixMatch(s, &found));
  };
  if (spec.remove_extra_whitespaces) {
    while (!input.empty() && next(input) == " ") input.remove_prefix(1);
  }
  if (input.empty()) return out;
  out.reserve(input.size() * 3 / 2 + 4);
  const std::string_view space = spec.escape_whitespaces ? kSpaceSymbol : " ";
  if (spec.add_dummy_prefix) out.append(space);
  bool is_prev_space = spec.remove_extra_whitespaces;
  while (!input.empty()) {
    const std::string_view consumed = next(input);
    std::string_view piece = consumed;
    if (is_prev_space) {
      while (!piece.empty() && piece[0] == ' ') piece.remove_prefix(1);
    }
    if (!piece.empty()) {
      for (const char c : piece) {
        if (c == ' ' && spec.escape_whitespaces) {
          out.append(kSpaceSymbol);
        } else {
          out.push_back(c);
        }
      }
      is_prev_space = piece.back() == ' ';
    }
    input.remove_prefix(consumed.size());
    if (!spec.remove_extra_whitespaces) is_prev_space = false;
  }
  if (spec.remove_extra_whitespaces) {
    while (out.size() >= space.size() &&
           std::string_view(out).substr(out.size() - space.size()) == space) {
      out.resize(out.size() - space.size());
    }
  }
  return out;
}

// SentencePiece's BPE: start from characters (user-defined pieces frozen whole), repeatedly
// merge the adjacent pair whose concatenation is the highest-scoring piece (leftmost on
// ties), then split merges that went through UNUSED pieces back into their parts.
void SentencePieceTokenizer::Model::EncodeBpe(std::string_view normalized,
                                              std::vector<Segment>* out) const {
  struct Symbol {
    int prev;
    int next;
    bool freeze;
    std::string_view piece;
  };
  struct Pair {
    int left;
    int right;
    float score;
    size_t size;
  };
  struct PairOrder {
    bool operator()(const Pair& a, const Pair& b) const {
      return a.score < b.score || (a.score == b.score && a.left > b.left);
    }
  };
  std::vector<Symbol> symbols;
  symbols.reserve(normalized.size());
  std::priority_queue<Pair, std::vector<Pair>, PairOrder> agenda;
  absl::flat_hash_map<std::string_view, std::pair<std::string_view, std::string_view>> rev_merge;

  auto maybe_add_pair = [&](int left, int right) {
    if (left < 0 || right < 0 || symbols[left].freeze || symbols[right].freeze) return;
    const std::string_view piece(symbols[left].piece.data(),
                                 symbols[left].piece.size() + symbols[right].piece.size());
    const auto it = pieces.find(piece);
    if (it == pieces.end()) return;
    agenda.push(Pair{left, right, proto.pieces[it->second].score, piece.size()});
    if (type(it->second) == PieceType::kUnused) {
      rev_merge[piece] = {symbols[left].piece, symbols[right].piece};
    }
  };

  std::string_view rest = normalized;
  while (!rest.empty()) {
    Symbol s;
    const size_t len = PrefixMatch(rest, &s.freeze);
    s.piece = rest.substr(0, len);
    s.prev = static_cast<int>(symbols.size()) - 1;
    rest.remove_prefix(len);
    s.next = rest.empty() ? -1 : static_cast<int>(symbols.size()) + 1;
    symbols.push_back(s);
  }
  if (symbols.empty()) return;
  for (size_t i = 1; i < symbols.size(); ++i) maybe_add_pair(static_cast<int>(i) - 1, i);

  while (!agenda.empty()) {
    const Pair top = agenda.top();
    agenda.pop();
    Symbol& left = symbols[top.left];
    Symbol& right = symbols[top.right];
    // Stale: one side was merged away since this pair was queued.
    if (left.piece.empty() || right.piece.empty() ||
        left.piece.size() + right.piece.size() != top.size) {
      continue;
    }
    left.piece = std::string_view(left.piece.data(), top.size);
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.left;
    right.piece = std::string_view();
    maybe_add_pair(left.prev, top.left);
    maybe_add_pair(top.left, left.next);
  }

  // Depth-first, left part first, split of the pieces that are UNUSED ids.
  std::vector<std::string_view> stack;
  for (int i = 0; i != -1; i = symbols[i].next) {
    stack.push_back(symbols[i].piece);
    while (!stack.empty()) {
      const std::string_view w = stack.back();
      stack.pop_back();
      const int32_t id = PieceToId(w);
      if (type(id) == PieceType::kUnused) {
        if (auto it = rev_merge.find(w); it != rev_merge.end()) {
          stack.push_back(it->second.second);
          stack.push_back(it->second.first);
          continue;
        }
      }
      out->push_back(Segment{w, id});
    }
  }
}

// SentencePiece's Unigram Viterbi (its EncodeOptimized): the best-scoring segmentation into
// pieces, an unknown character costing min_score - 10, user-defined pieces always winning.
// The arithmetic (float vs double) follows SentencePiece's so that ties break alike.
void SentencePieceTokenizer::Model::EncodeUnigram(std::string_view normalized,
                                                  std::vector<Segment>* out) const {
  struct Node {
    int32_t id = -1;
    float best_path_score = 0.0f;
    int starts_at = -1;
  };
  const int size = static_cast<int>(normalized.size());
  if (size == 0) return;
  const float unk_score = min_score - kUnkPenalty;
  std::vector<Node> best(size + 1);
  int starts_at = 0;
  while (starts_at < size) {
    const float best_till_here = best[starts_at].best_path_score;
    bool has_single_node = false;
    const size_t mblen =
        std::min<size_t>(OneCharLen(normalized[starts_at]), size - starts_at);
    const size_t max_len = std::min<size_t>(max_piece_len, size - starts_at);
    for (size_t length = 1; length <= max_len; ++length) {
      const auto it = pieces.find(normalized.substr(starts_at, length));
      if (it == pieces.end()) continue;
      const int32_t id = it->second;
      if (type(id) == PieceType::kUnused) continue;
      const double score = type(id) == PieceType::kUserDefined
                               ? static_cast<double>(length * max_score - 0.1)
                               : static_cast<double>(proto.pieces[id].score);
      const double candidate = score + best_till_here;
      Node& target = best[starts_at + length];
      if (target.starts_at == -1 || candidate > target.best_path_score) {
        target.best_path_score = static_cast<float>(candidate);
        target.starts_at = starts_at;
        target.id = id;
      }
      if (length == mblen) has_single_node = true;
    }
    if (!has_single_node) {
      Node& target = best[starts_at + mblen];
      const float candidate = unk_score + best_till_here;
      if (target.starts_at == -1 || candidate > target.best_path_score) {
        target.best_path_score = candidate;
        target.starts_at = starts_at;
        target.id = unk_id;
      }
    }
    starts_at += static_cast<int>(mblen);
  }
  const size_t first = out->size();
  for (int ends_at = size; ends_at > 0;) {
    const Node& node = best[ends_at];
    out->push_back(Segment{normalized.substr(node.starts_at, ends_at - node.starts_at), node.id});
    ends_at = node.starts_at;
  }
  std::reverse(out->begin() + first, out->end());
}

SentencePieceTokenizer::SentencePieceTokenizer() = default;
SentencePieceTokenizer::~SentencePieceTokenizer() = default;

absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::Load(
    const std::string& path) {
  CCTUNE_ASSIGN_OR_RETURN(std::string bytes, ReadTokenizerFile(path));
  return FromString(bytes, path);
}

absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::FromString(
    std::string_view bytes, const std::string& path) {
  auto model = std::make_unique<Model>();
  CCTUNE_ASSIGN_OR_RETURN(model->proto, ParseSentencePieceModel(bytes, path));
  const SentencePieceModel& proto = model->proto;
  using ModelType = SentencePieceModel::ModelType;
  if (proto.model_type != ModelType::kBpe && proto.model_type != ModelType::kUnigram) {
    return absl::UnimplementedError(absl::StrCat(
        "SentencePiece model ", path, ": model_type ", static_cast<int>(proto.model_type),
        " (WORD or CHAR) is not implemented; only BPE and UNIGRAM are"));
  }
  if (!proto.precompiled_charsmap.empty()) {
    return absl::UnimplementedError(absl::StrCat(
        "SentencePiece model ", path, ": normalizer \"", proto.normalizer_name, "\" (",
        proto.precompiled_charsmap.size(),
        "-byte precompiled_charsmap) is not implemented; only the identity normalizer is"));
  }
  if (!proto.denormalizer_charsmap.empty()) {
    return absl::UnimplementedError(
        absl::StrCat("SentencePiece model ", path, ": a denormalizer_spec is not implemented"));
  }
  if (proto.treat_whitespace_as_suffix) {
    return absl::UnimplementedError(absl::StrCat(
        "SentencePiece model ", path, ": treat_whitespace_as_suffix is not implemented"));
  }
  // Lookup tables over the model's strings (which stay put: the model is not moved again).
  model->min_score = std::numeric_limits<float>::max();
  model->max_score = std::numeric_limits<float>::min();  // SentencePiece's FLT_MIN start
  for (size_t i = 0; i < proto.pieces.size(); ++i) {
    const SentencePieceModel::Piece& p = proto.pieces[i];
    const int32_t id = static_cast<int32_t>(i);
    switch (p.type) {
      case PieceType::kNormal:
        model->min_score = std::min(model->min_score, p.score);
        model->max_score = std::max(model->max_score, p.score);
        [[fallthrough]];
      case PieceType::kUnused:
        model->pieces.emplace(p.piece, id);
        break;
      case PieceType::kUserDefined:
        model->pieces.emplace(p.piece, id);
        model->user_defined.insert(p.piece);
        model->max_user_defined_len = std::max(model->max_user_defined_len, p.piece.size());
        break;
      case PieceType::kUnknown:
        model->unk_id = id;
        model->reserved.emplace(p.piece, id);
        break;
      case PieceType::kByte:
        model->byte_ids[SentencePieceByteValue(p.piece)] = id;
        model->reserved.emplace(p.piece, id);
        break;
      case PieceType::kControl:
        model->reserved.emplace(p.piece, id);
        break;
    }
    model->max_piece_len = std::max(model->max_piece_len, p.piece.size());
  }

  std::unique_ptr<SentencePieceTokenizer> tok(new SentencePieceTokenizer());
  tok->path_ = path;
  tok->vocab_size_ = static_cast<int32_t>(proto.pieces.size());
  // As SentencePiece: the special ids are those of the named pieces, when they are CONTROL.
  auto control_id = [&model](const std::string& piece) {
    const int32_t id = model->PieceToId(piece);
    return model->IsControl(id) ? id : -1;
  };
  tok->bos_id_ = control_id(proto.bos_piece);
  tok->eos_id_ = control_id(proto.eos_piece);
  const int32_t pad = control_id(proto.pad_piece);
  tok->pad_id_ = pad >= 0 ? pad : 0;
  if (tok->bos_id_ < 0 || tok->eos_id_ < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SentencePiece model ", path, " lacks bos or eos (bos_id ", tok->bos_id_, ", eos_id ",
        tok->eos_id_, ")"));
  }
  tok->stop_tokens_ = {tok->eos_id_};
  tok->model_ = std::move(model);
  std::vector<int32_t> newline;
  tok->EncodeUtf8("\n", &newline);
  tok->newline_prefix_ids_ = newline.size();
  return tok;
}

void SentencePieceTokenizer::EncodeUtf8(std::string_view text, std::vector<int32_t>* ids) const {
  const Model& m = *model_;
  const std::string normalized = m.Normalize(text);
  std::vector<Segment> segments;
  if (m.proto.model_type == SentencePieceModel::ModelType::kBpe) {
    m.EncodeBpe(normalized, &segments);
  } else {
    m.EncodeUnigram(normalized, &segments);
  }
  // SentencePiece's PopulateSentencePieceText: unknown text becomes its bytes' pieces with
  // byte_fallback; otherwise a run of unknowns is one unknown id.
  bool prev_is_unk = false;
  for (const Segment& s : segments) {
    const bool is_unk = m.IsUnknown(s.id);
    if (m.IsControl(s.id)) {
      ids->push_back(s.id);
    } else if (is_unk && m.proto.byte_fallback) {
      for (const char c : s.piece) ids->push_back(m.byte_ids[static_cast<uint8_t>(c)]);
    } else if (!(prev_is_unk && is_unk)) {
      ids->push_back(s.id);
    }
    prev_is_unk = is_unk;
  }
}

void SentencePieceTokenizer::EncodeAppend(std::string_view text, const EncodeOptions& options,
                                          std::vector<int32_t>* ids) const {
  if (options.add_bos) ids->push_back(bos_id_);
  std::string owned;
  if (options.trim_leading_whitespace) {
    owned = "\n";
    AppendReplacingInvalidUtf8(text, &owned);
    text = owned;
  } else if (!IsValidUtf8(text)) {
    owned = ReplaceInvalidUtf8(text);
    text = owned;
  }
  const size_t start = ids->size();
  EncodeUtf8(text, ids);
  if (options.trim_leading_whitespace) {
    const size_t skip = std::min(newline_prefix_ids_, ids->size() - start);
    ids->erase(ids->begin() + start, ids->begin() + start + skip);
  }
  if (options.add_eos) ids->push_back(eos_id_);
}

absl::StatusOr<std::string> SentencePieceTokenizer::Decode(absl::Span<const int32_t> ids) const {
  for (const int32_t id : ids) {
    CCTUNE_RETURN_IF_ERROR(CheckTokenId(id, vocab_size_, "SentencePiece Decode"));
  }
  const Model& m = *model_;
  const SentencePieceModel& spec = m.proto;
  std::string text;
  std::string bytes;  // a run of byte pieces, joined into characters when it ends
  auto flush_bytes = [&text, &bytes]() {
    std::string_view rest = bytes;
    while (!rest.empty()) {
      const size_t n = Utf8SequenceLength(rest);
      if (n == 0) {
        text.append(kReplacementChar);  // SentencePiece: one U+FFFD per invalid byte
        rest.remove_prefix(1);
      } else {
        text.append(rest.substr(0, n));
        rest.remove_prefix(n);
      }
    }
    bytes.clear();
  };
  // The first "▁" of the text is the dummy prefix: SentencePiece drops it.
  bool is_bos_ws = true;
  bool bos_ws_seen = false;
  for (const int32_t id : ids) {
    const PieceType type = m.type(id);
    if (type == PieceType::kByte) {
      bytes.push_back(static_cast<char>(SentencePieceByteValue(spec.pieces[id].piece)));
      continue;
    }
    flush_bytes();
    if (bos_ws_seen || !text.empty()) is_bos_ws = false;
    bos_ws_seen = false;
    if (type == PieceType::kControl) continue;
    if (type == PieceType::kUnknown) {
      text.append(spec.unk_surface);
      continue;
    }
    std::string_view piece = spec.pieces[id].piece;
    if (is_bos_ws && (spec.add_dummy_prefix || spec.remove_extra_whitespaces)) {
      if (piece.substr(0, kSpaceSymbol.size()) == kSpaceSymbol) {
        piece.remove_prefix(kSpaceSymbol.size());
        bos_ws_seen = !spec.remove_extra_whitespaces;
      }
    }
    for (size_t i = 0; i < piece.size();) {
      if (piece.compare(i, kSpaceSymbol.size(), kSpaceSymbol) == 0) {
        text.push_back(' ');
        i += kSpaceSymbol.size();
      } else {
        text.push_back(piece[i++]);
      }
    }
  }
  flush_bytes();
  // Only a model with invalid UTF-8 in its pieces gets here; keep the Tokenizer contract.
  if (!IsValidUtf8(text)) text = ReplaceInvalidUtf8(text);
  return text;
}

absl::StatusOr<std::string> SentencePieceTokenizer::DecodePiece(int32_t id,
                                                                int32_t prev_id) const {
  CCTUNE_RETURN_IF_ERROR(CheckTokenId(id, vocab_size_, "SentencePiece DecodePiece"));
  const Model& m = *model_;
  if (m.IsControl(id)) return std::string();
  const std::string& piece = m.proto.pieces[id].piece;
  if (m.IsByte(id)) return std::string(1, static_cast<char>(SentencePieceByteValue(piece)));
  if (m.IsUnknown(id)) return m.proto.unk_surface;
  std::string out;
  size_t i = 0;
  while (i < piece.size()) {
    if (piece.compare(i, kSpaceSymbol.size(), kSpaceSymbol) == 0) {
      out += ' ';
      i += kSpaceSymbol.size();
    } else {
      out += piece[i++];
    }
  }
  if ((prev_id < 0 || prev_id == bos_id_) && !out.empty() && out[0] == ' ') out.erase(0, 1);
  return out;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> MakeLlama2Tokenizer(const std::string& path) {
  CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<SentencePieceTokenizer> tok,
                          SentencePieceTokenizer::Load(path));
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

}  // namespace cctune
