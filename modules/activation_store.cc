#include "modules/activation_store.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/status.h"

namespace cctune {

Tensor* ActivationStore::Grad(const Tensor& param) {
  auto it = grads_.find(&param);
  return it == grads_.end() ? nullptr : &it->second;
}

void ActivationStore::SetDropout(const Module* module, uint64_t seed, uint64_t offset) {
  dropout_seed_ = seed;
  dropout_[module] = offset;
}

const uint64_t* ActivationStore::DropoutOffset(const Module* module) const {
  if (dropout_.empty()) return nullptr;
  auto it = dropout_.find(module);
  return it == dropout_.end() ? nullptr : &it->second;
}

absl::StatusOr<Tensor> ActivationStore::Temp(StoreSlot slot, Shape shape, const Device& device) {
  return temps_.Get(static_cast<size_t>(slot), std::move(shape), DType::kF32, device);
}

absl::StatusOr<Tensor> ActivationStore::ZeroTemp(StoreSlot slot, Shape shape,
                                                 const Device& device) {
  CCTUNE_ASSIGN_OR_RETURN(Tensor t, Temp(slot, std::move(shape), device));
  CCTUNE_RETURN_IF_ERROR(ZeroInPlace(t, this));
  return t;
}

absl::Status EnsureF32(Tensor& t, const Shape& shape, const Device& device) {
  if (t.defined() && t.dtype() == DType::kF32 && t.shape() == shape && t.device() == device &&
      t.is_contiguous()) {
    return absl::OkStatus();
  }
  CCTUNE_ASSIGN_OR_RETURN(t, Tensor::Empty(shape, DType::kF32, device));
  return absl::OkStatus();
}

absl::Status ZeroInPlace(Tensor& t, ActivationStore* store) {
  if (!t.defined() || t.numel() == 0 || t.device().is_meta()) return absl::OkStatus();
  if (!t.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat("ZeroInPlace: tensor ",
                                                   ShapeToString(t.shape()),
                                                   " is not contiguous"));
  }
  if (t.device().is_cpu()) {
    // As Tensor::Zeros fills: all threads for large buffers, in chunks of 256 KiB.
    char* p = static_cast<char*>(t.raw_data());
    constexpr int64_t kChunkBytes = int64_t{1} << 18;
    const int64_t bytes = static_cast<int64_t>(t.nbytes());
    const int64_t chunks = (bytes + kChunkBytes - 1) / kChunkBytes;
#pragma omp parallel for schedule(static) if (chunks > 4)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t begin = c * kChunkBytes;
      std::memset(p + begin, 0, std::min(kChunkBytes, bytes - begin));
    }
    return absl::OkStatus();
  }
  Tensor local_zero;
  Tensor* zero = store != nullptr ? &store->device_zero_ : &local_zero;
  if (!zero->defined() || zero->device() != t.device() || zero->dtype() != t.dtype()) {
    CCTUNE_ASSIGN_OR_RETURN(*zero, Tensor::Zeros({1}, t.dtype(), t.device()));
  }
  CCTUNE_ASSIGN_OR_RETURN(Tensor zeros, zero->Expand({t.numel()}));
  CCTUNE_ASSIGN_OR_RETURN(Tensor flat, t.View({t.numel()}));
  return flat.CopyFrom(zeros);
}

}  // namespace cctune
