#include "tokenizers/sentencepiece_reference.h"

#include <sentencepiece_processor.h>

namespace cctune {
namespace testing {

struct ReferenceSentencePiece::Impl {
  sentencepiece::SentencePieceProcessor processor;
};

ReferenceSentencePiece::ReferenceSentencePiece() : impl_(new Impl()) {}
ReferenceSentencePiece::~ReferenceSentencePiece() = default;

std::unique_ptr<ReferenceSentencePiece> ReferenceSentencePiece::Load(const std::string& path,
                                                                     std::string* error) {
  std::unique_ptr<ReferenceSentencePiece> ref(new ReferenceSentencePiece());
  const auto status = ref->impl_->processor.Load(path);
  if (!status.ok()) {
    *error = status.ToString();
    return nullptr;
  }
  return ref;
}

bool ReferenceSentencePiece::Encode(std::string_view text, std::vector<int>* ids,
                                    std::string* error) const {
  const auto status = impl_->processor.Encode(text, ids);
  if (!status.ok()) *error = status.ToString();
  return status.ok();
}

bool ReferenceSentencePiece::Decode(const std::vector<int>& ids, std::string* text,
                                    std::string* error) const {
  const auto status = impl_->processor.Decode(ids, text);
  if (!status.ok()) *error = status.ToString();
  return status.ok();
}

int ReferenceSentencePiece::piece_size() const { return impl_->processor.GetPieceSize(); }

}  // namespace testing
}  // namespace cctune
