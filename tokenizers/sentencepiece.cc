#include "tokenizers/sentencepiece.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "tokenizers/sentencepiece_bridge.h"
#include "tokenizers/utf8.h"

namespace cctune {

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::Load(
    const std::string& path) {
  // SentencePiece reports a missing file and a corrupt one alike; tell them apart here.
  CCTUNE_RETURN_IF_ERROR(ReadTokenizerFile(path).status());
  std::string error;
  std::unique_ptr<internal::SentencePieceBridge> sp =
      internal::SentencePieceBridge::Load(path, &error);
  if (sp == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot load SentencePiece model ", path, ": ", error));
  }
  std::unique_ptr<SentencePieceTokenizer> tok(new SentencePieceTokenizer());
  tok->path_ = path;
  tok->vocab_size_ = sp->piece_size();
  tok->bos_id_ = sp->bos_id();
  tok->eos_id_ = sp->eos_id();
  tok->pad_id_ = sp->pad_id() >= 0 ? sp->pad_id() : 0;
  if (tok->bos_id_ < 0 || tok->eos_id_ < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SentencePiece model ", path, " lacks bos or eos (bos_id ", tok->bos_id_, ", eos_id ",
        tok->eos_id_, ")"));
  }
  tok->stop_tokens_ = {tok->eos_id_};
  std::vector<int> newline;
  if (!sp->Encode("\n", &newline, &error)) {
    return absl::InternalError(absl::StrCat("SentencePiece ", path, ": ", error));
  }
  tok->newline_prefix_ids_ = newline.size();
  tok->sp_ = std::move(sp);
  return tok;
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
  std::vector<int> encoded;
  std::string error;
  // Encoding a loaded model does not fail on valid UTF-8.
  CCTUNE_CHECK(sp_->Encode(text, &encoded, &error), "SentencePiece Encode of ", path_, ": ",
               error);
  const size_t skip = options.trim_leading_whitespace ? newline_prefix_ids_ : 0;
  for (size_t i = skip; i < encoded.size(); ++i) ids->push_back(encoded[i]);
  if (options.add_eos) ids->push_back(eos_id_);
}

absl::StatusOr<std::string> SentencePieceTokenizer::Decode(absl::Span<const int32_t> ids) const {
  std::vector<int> v(ids.begin(), ids.end());
  for (const int32_t id : ids) {
    CCTUNE_RETURN_IF_ERROR(CheckTokenId(id, vocab_size_, "SentencePiece Decode"));
  }
  std::string text, error;
  if (!sp_->Decode(v, &text, &error)) {
    return absl::InvalidArgumentError(absl::StrCat("SentencePiece Decode: ", error));
  }
  return text;
}

absl::StatusOr<std::string> SentencePieceTokenizer::DecodePiece(int32_t id,
                                                                int32_t prev_id) const {
  CCTUNE_RETURN_IF_ERROR(CheckTokenId(id, vocab_size_, "SentencePiece DecodePiece"));
  if (sp_->IsControl(id)) return std::string();
  const std::string& piece = sp_->IdToPiece(id);
  if (sp_->IsByte(id)) {
    // "<0xAB>"
    unsigned value = 0;
    for (size_t i = 3; i + 1 < piece.size(); ++i) {
      const char c = piece[i];
      value = value * 16 + static_cast<unsigned>(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return std::string(1, static_cast<char>(value));
  }
  if (sp_->IsUnknown(id)) return std::string(" \xE2\x81\x87 ");  // SentencePiece's " ⁇ "
  std::string out;
  static const std::string kSpace = "\xE2\x96\x81";  // U+2581
  size_t i = 0;
  while (i < piece.size()) {
    if (piece.compare(i, kSpace.size(), kSpace) == 0) {
      out += ' ';
      i += kSpace.size();
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
