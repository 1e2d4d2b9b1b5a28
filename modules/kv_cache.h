// KVCache: keys and values of past positions for incremental decoding.
//
// Storage: k and v, each [b, n_kv, max_seq_len, h_d] in the cache dtype, zero-initialised.
// Metadata: how many positions are filled (KvCachePositions), kept apart from the storage so
// that a paged layout can later replace the dense tensors without touching the bookkeeping.
//
// Update(k, v) writes s new positions at the current position and advances it. A batch
// larger than the cache's, a write past max_seq_len, or any shape mismatch returns an error
// Status and writes nothing. Bytes() is exactly 2·b·n_kv·max_seq_len·h_d·sizeof(dtype).
#ifndef CCTUNE_MODULES_KV_CACHE_H_
#define CCTUNE_MODULES_KV_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace cctune {

// Which positions of a cache hold data. Every batch row advances together (as torchtune's
// cache_pos does); padding is expressed through attention masks.
class KvCachePositions {
 public:
  explicit KvCachePositions(int64_t max_seq_len) : max_seq_len_(max_seq_len) {}

  int64_t size() const { return size_; }
  int64_t max_seq_len() const { return max_seq_len_; }
  // The first position of a write of `seq_len` new positions, or OutOfRange when it would
  // pass max_seq_len (the message names both lengths). Does not advance.
  absl::StatusOr<int64_t> Reserve(int64_t seq_len) const;
  void Advance(int64_t seq_len) { size_ += seq_len; }
  void Reset() { size_ = 0; }

 private:
  int64_t max_seq_len_;
  int64_t size_ = 0;
};

class KVCache {
 public:
  // Allocates zeroed storage on `device` (nothing on meta). dtype must be a float type.
  static absl::StatusOr<std::unique_ptr<KVCache>> Create(int64_t batch_size, int64_t max_seq_len,
                                                         int64_t num_kv_heads, int64_t head_dim,
                                                         DType dtype,
                                                         const Device& device = Device::Cpu());

  int64_t batch_size() const { return batch_size_; }
  int64_t max_seq_len() const { return positions_.max_seq_len(); }
  int64_t num_kv_heads() const { return num_kv_heads_; }
  int64_t head_dim() const { return head_dim_; }
  DType dtype() const { return k_cache_.dtype(); }
  const Device& device() const { return k_cache_.device(); }

  // Filled positions.
  int64_t Size() const { return positions_.size(); }
  const KvCachePositions& positions() const { return positions_; }
  // Bytes of k and v storage: 2·b·n_kv·max_seq_len·h_d·sizeof(dtype).
  size_t Bytes() const { return k_cache_.nbytes() + v_cache_.nbytes(); }

  // Writes k, v [b', n_kv, s, h_d] (b' <= batch_size; any float dtype and strides; on the
  // cache's device) at positions [Size(), Size() + s) of batch rows [0, b'), then advances.
  absl::Status Update(const Tensor& k, const Tensor& v);
  // Zeroes the storage and the position.
  absl::Status Reset();

  // The whole storage, [b, n_kv, max_seq_len, h_d].
  const Tensor& k_cache() const { return k_cache_; }
  const Tensor& v_cache() const { return v_cache_; }
  // Views of the filled part of the first `batch` rows: [batch, n_kv, Size(), h_d].
  // batch = -1 means batch_size(). InvalidArgument when batch > batch_size().
  absl::StatusOr<Tensor> FilledKeys(int64_t batch = -1) const;
  absl::StatusOr<Tensor> FilledValues(int64_t batch = -1) const;

 private:
  KVCache(Tensor k, Tensor v, int64_t batch_size, int64_t max_seq_len, int64_t num_kv_heads,
          int64_t head_dim);
  absl::StatusOr<Tensor> Filled(const Tensor& cache, int64_t batch, const char* what) const;

  Tensor k_cache_;  // [b, n_kv, max_seq_len, h_d]
  Tensor v_cache_;  // [b, n_kv, max_seq_len, h_d]
  int64_t batch_size_;
  int64_t num_kv_heads_;
  int64_t head_dim_;
  KvCachePositions positions_;
};

}  // namespace cctune

#endif  // CCTUNE_MODULES_KV_CACHE_H_
