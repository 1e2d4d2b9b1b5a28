#include "modules/scratch.h"

#include "core/status.h"

namespace cctune {

absl::StatusOr<Tensor> Scratch::Get(size_t slot, Shape shape, DType dtype, const Device& device) {
  if (device.is_meta()) return Tensor::Empty(std::move(shape), dtype, device);
  if (pool_ != nullptr) return pool_->Get(first_slot_ + slot, std::move(shape), dtype, device);
  if (slot >= slots_.size()) slots_.resize(slot + 1);
  // At least one byte so that empty shapes still get a storage to view.
  const size_t bytes = std::max<size_t>(1, NumElements(shape) * DTypeSize(dtype));
  std::shared_ptr<Storage>& s = slots_[slot];
  // Any dtype may reuse the bytes; a caller still holding an older, replaced storage keeps it.
  if (s == nullptr || s->bytes() < bytes || s->device() != device) {
    CCTUNE_ASSIGN_OR_RETURN(s, Storage::Allocate(device, bytes));
  }
  return Tensor::FromStorage(s, std::move(shape), dtype);
}

void Scratch::Share(std::shared_ptr<Scratch> pool, size_t first_slot) {
  slots_.clear();
  pool_ = std::move(pool);
  first_slot_ = first_slot;
}

size_t Scratch::Bytes() const {
  size_t n = 0;
  for (const auto& s : slots_) n += s != nullptr ? s->bytes() : 0;
  return n;
}

}  // namespace cctune
