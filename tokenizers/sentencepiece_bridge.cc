#include "tokenizers/sentencepiece_bridge.h"

#include <sentencepiece_processor.h>

namespace cctune {
namespace internal {

struct SentencePieceBridge::Impl {
  sentencepiece::SentencePieceProcessor processor;
};

SentencePieceBridge::SentencePieceBridge() : impl_(new Impl()) {}
SentencePieceBridge::~SentencePieceBridge() = default;

std::unique_ptr<SentencePieceBridge> SentencePieceBridge::Load(const std::string& path,
                                                               std::string* error) {
  std::unique_ptr<SentencePieceBridge> bridge(new SentencePieceBridge());
  const auto status = bridge->impl_->processor.Load(path);
  if (!status.ok()) {
    *error = status.ToString();
    return nullptr;
  }
  return bridge;
}

bool SentencePieceBridge::Encode(std::string_view text, std::vector<int>* ids,
                                 std::string* error) const {
  const auto status = impl_->processor.Encode(text, ids);
  if (!status.ok()) *error = status.ToString();
  return status.ok();
}

bool SentencePieceBridge::Decode(const std::vector<int>& ids, std::string* text,
                                 std::string* error) const {
  const auto status = impl_->processor.Decode(ids, text);
  if (!status.ok()) *error = status.ToString();
  return status.ok();
}

int SentencePieceBridge::piece_size() const { return impl_->processor.GetPieceSize(); }
int SentencePieceBridge::bos_id() const { return impl_->processor.bos_id(); }
int SentencePieceBridge::eos_id() const { return impl_->processor.eos_id(); }
int SentencePieceBridge::pad_id() const { return impl_->processor.pad_id(); }
const std::string& SentencePieceBridge::IdToPiece(int id) const {
  return impl_->processor.IdToPiece(id);
}
float SentencePieceBridge::GetScore(int id) const { return impl_->processor.GetScore(id); }
bool SentencePieceBridge::IsControl(int id) const { return impl_->processor.IsControl(id); }
bool SentencePieceBridge::IsByte(int id) const { return impl_->processor.IsByte(id); }
bool SentencePieceBridge::IsUnknown(int id) const { return impl_->processor.IsUnknown(id); }

}  // namespace internal
}  // namespace cctune
