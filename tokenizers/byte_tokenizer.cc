#include "tokenizers/byte_tokenizer.h"

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "tokenizers/utf8.h"

namespace cctune {
namespace {

constexpr std::string_view kSpecialText[] = {
    "<|begin_of_text|>", "<|end_of_text|>", "<|pad|>",    "<|start_header_id|>",
    "<|end_header_id|>", "<|eot_id|>",      "<|eom_id|>", "<|python_tag|>",
};
constexpr int32_t kNumSpecial = sizeof(kSpecialText) / sizeof(kSpecialText[0]);
static_assert(ByteTokenizer::kNumBytes + kNumSpecial == ByteTokenizer::kVocabSize);

bool PrintsNothing(int32_t id) {
  return id == ByteTokenizer::kBos || id == ByteTokenizer::kEos || id == ByteTokenizer::kPad;
}

}  // namespace

std::string_view ByteTokenizer::SpecialTokenText(int32_t id) {
  if (id < kNumBytes || id >= kVocabSize) return {};
  return kSpecialText[id - kNumBytes];
}

std::optional<int32_t> ByteTokenizer::SpecialTokenId(std::string_view token) const {
  for (int32_t i = 0; i < kNumSpecial; ++i) {
    if (token == kSpecialText[i]) return kNumBytes + i;
  }
  return std::nullopt;
}

void ByteTokenizer::EncodeAppend(std::string_view text, const EncodeOptions& options,
                                 std::vector<int32_t>* ids) const {
  ids->reserve(ids->size() + text.size() + 2);
  if (options.add_bos) ids->push_back(kBos);
  size_t i = 0;
  while (i < text.size()) {
    if (options.parse_special && text[i] == '<' && i + 1 < text.size() && text[i + 1] == '|') {
      bool matched = false;
      for (int32_t s = 0; s < kNumSpecial; ++s) {
        if (text.substr(i, kSpecialText[s].size()) == kSpecialText[s]) {
          ids->push_back(kNumBytes + s);
          i += kSpecialText[s].size();
          matched = true;
          break;
        }
      }
      if (matched) continue;
    }
    ids->push_back(static_cast<uint8_t>(text[i]));
    ++i;
  }
  if (options.add_eos) ids->push_back(kEos);
}

absl::StatusOr<std::string> ByteTokenizer::Decode(absl::Span<const int32_t> ids) const {
  std::string bytes;
  bytes.reserve(ids.size());
  for (int32_t id : ids) {
    CCTUNE_RETURN_IF_ERROR(CheckTokenId(id, kVocabSize, "ByteTokenizer::Decode"));
    if (id < kNumBytes) {
      bytes.push_back(static_cast<char>(id));
    } else if (!PrintsNothing(id)) {
      bytes.append(SpecialTokenText(id));
    }
  }
  return ReplaceInvalidUtf8(bytes);
}

absl::StatusOr<std::string> ByteTokenizer::DecodePiece(int32_t id, int32_t prev_id) const {
  CCTUNE_RETURN_IF_ERROR(CheckTokenId(id, kVocabSize, "ByteTokenizer::DecodePiece"));
  if (id < kNumBytes) return std::string(1, static_cast<char>(id));
  if (PrintsNothing(id)) return std::string();
  return std::string(SpecialTokenText(id));
}

}  // namespace cctune
