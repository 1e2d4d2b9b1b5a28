#include "modules/kv_cache.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace cctune {

absl::StatusOr<int64_t> KvCachePositions::Reserve(int64_t seq_len) const {
  if (seq_len < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KVCache: cannot write a negative number of positions (", seq_len, ")"));
  }
  if (size_ + seq_len > max_seq_len_) {
    return absl::OutOfRangeError(
        absl::StrCat("KVCache: writing ", seq_len, " positions at position ", size_,
                     " would make the cache reach a sequence length of ", size_ + seq_len,
                     ", past its max_seq_len (", max_seq_len_, ")"));
  }
  return size_;
}

absl::StatusOr<std::unique_ptr<KVCache>> KVCache::Create(int64_t batch_size, int64_t max_seq_len,
                                                         int64_t num_kv_heads, int64_t head_dim,
                                                         DType dtype, const Device& device) {
  if (batch_size <= 0 || max_seq_len <= 0 || num_kv_heads <= 0 || head_dim <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KVCache: batch_size (", batch_size, "), max_seq_len (", max_seq_len, "), num_kv_heads (",
        num_kv_heads, ") and head_dim (", head_dim, ") must all be positive"));
  }
  if (!IsFloating(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("KVCache: dtype must be a float type, got ", DTypeName(dtype)));
  }
  const Shape shape = {batch_size, num_kv_heads, max_seq_len, head_dim};
  CCTUNE_ASSIGN_OR_RETURN(Tensor k, Tensor::Zeros(shape, dtype, device));
  CCTUNE_ASSIGN_OR_RETURN(Tensor v, Tensor::Zeros(shape, dtype, device));
  return std::unique_ptr<KVCache>(
      new KVCache(std::move(k), std::move(v), batch_size, max_seq_len, num_kv_heads, head_dim));
}

KVCache::KVCache(Tensor k, Tensor v, int64_t batch_size, int64_t max_seq_len, int64_t num_kv_heads,
                 int64_t head_dim)
    : k_cache_(std::move(k)),
      v_cache_(std::move(v)),
      batch_size_(batch_size),
      num_kv_heads_(num_kv_heads),
      head_dim_(head_dim),
      positions_(max_seq_len) {}

absl::Status KVCache::Update(const Tensor& k, const Tensor& v) {
  if (k.dim() != 4 || v.shape() != k.shape()) {
    return absl::InvalidArgumentError(
        absl::StrCat("KVCache::Update: k and v must both be [b, n_kv, s, h_d], got k ",
                     ShapeToString(k.shape()), " and v ", ShapeToString(v.shape())));
  }
  const int64_t b = k.size(0), s = k.size(2);
  if (b > batch_size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("KVCache::Update: the cache was set up with a batch size of ", batch_size_,
                     ", but found new key tensors with batch size ", b));
  }
  if (k.size(1) != num_kv_heads_ || k.size(3) != head_dim_) {
    return absl::InvalidArgumentError(absl::StrCat("KVCache::Update: the cache holds [b, ",
                                                   num_kv_heads_, ", s, ", head_dim_,
                                                   "] but k and v are ", ShapeToString(k.shape())));
  }
  if (!IsFloating(k.dtype()) || !IsFloating(v.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat("KVCache::Update: k and v must be float, got ",
                                                   DTypeName(k.dtype()), " and ",
                                                   DTypeName(v.dtype())));
  }
  if (k.device() != device() || v.device() != device()) {
    return absl::InvalidArgumentError(
        absl::StrCat("KVCache::Update: the cache is on ", device().ToString(), " but k is on ",
                     k.device().ToString(), " and v on ", v.device().ToString()));
  }
  CCTUNE_ASSIGN_OR_RETURN(const int64_t start, positions_.Reserve(s));
  if (!device().is_meta() && b > 0 && s > 0) {
    CCTUNE_ASSIGN_OR_RETURN(Tensor kdst, k_cache_.Narrow(0, 0, b));
    CCTUNE_ASSIGN_OR_RETURN(kdst, kdst.Narrow(2, start, s));
    CCTUNE_ASSIGN_OR_RETURN(Tensor vdst, v_cache_.Narrow(0, 0, b));
    CCTUNE_ASSIGN_OR_RETURN(vdst, vdst.Narrow(2, start, s));
    CCTUNE_RETURN_IF_ERROR(kdst.CopyFrom(k));
    CCTUNE_RETURN_IF_ERROR(vdst.CopyFrom(v));
  }
  positions_.Advance(s);
  return absl::OkStatus();
}

absl::Status KVCache::Reset() {
  if (!device().is_meta()) {
    if (device().is_cpu()) {
      std::memset(k_cache_.raw_data(), 0, k_cache_.nbytes());
      std::memset(v_cache_.raw_data(), 0, v_cache_.nbytes());
    } else {
      CCTUNE_ASSIGN_OR_RETURN(Tensor zeros, Tensor::Zeros(k_cache_.shape(), dtype()));
      CCTUNE_RETURN_IF_ERROR(k_cache_.CopyFrom(zeros));
      CCTUNE_RETURN_IF_ERROR(v_cache_.CopyFrom(zeros));
    }
  }
  positions_.Reset();
  return absl::OkStatus();
}

absl::StatusOr<Tensor> KVCache::Filled(const Tensor& cache, int64_t batch, const char* what) const {
  if (batch < 0) batch = batch_size_;
  if (batch > batch_size_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KVCache::", what, ": batch ", batch, " exceeds the cache's batch size ", batch_size_));
  }
  CCTUNE_ASSIGN_OR_RETURN(Tensor t, cache.Narrow(0, 0, batch));
  return t.Narrow(2, 0, positions_.size());  // [batch, n_kv, size, h_d]
}

absl::StatusOr<Tensor> KVCache::FilledKeys(int64_t batch) const {
  return Filled(k_cache_, batch, "FilledKeys");
}

absl::StatusOr<Tensor> KVCache::FilledValues(int64_t batch) const {
  return Filled(v_cache_, batch, "FilledValues");
}

}  // namespace cctune
