// Batching: samples -> [b, s] tensors. Unpacked samples are right-padded to the longest one in
// the batch (rounded up to pad_to_multiple_of) with pad_id, labels with kIgnoreIndex
// (torchtune's padded_collate_sft). Packed samples all have max_seq_len tokens and are stacked
// with their input_pos and seq_lens (padded_collate_packed); the per-document mask is built
// on request by BlockCausalMask, since a [b, s, s] mask is large for long sequences.
#ifndef CCTUNE_DATA_COLLATE_H_
#define CCTUNE_DATA_COLLATE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/tensor.h"
#include "data/dataset.h"

namespace cctune {

struct CollateOptions {
  int32_t pad_id = 0;
  int32_t ignore_index = kIgnoreIndex;
  int64_t pad_to_multiple_of = 1;  // unpacked batches only
};

struct Batch {
  Tensor tokens;     // [b, s] i64
  Tensor labels;     // [b, s] i64, ignore_index where no loss (not shifted)
  Tensor input_pos;  // [b, s] i64 position within the document; packed batches only
  std::vector<std::vector<int32_t>> seq_lens;  // packed: each row's document lengths
  bool packed = false;
  int64_t num_tokens = 0;        // tokens that are not padding
  int64_t num_label_tokens = 0;  // labels != ignore_index
};

// All samples packed or none. Errors: an empty batch, tokens/labels of different lengths,
// packed samples of different lengths.
absl::StatusOr<Batch> Collate(absl::Span<const Sample* const> samples,
                              const CollateOptions& options);

// [b, s, s] bool: mask[r, i, j] is true when position i may attend to j (same document of
// row r and j <= i). Unpacked batches get the plain causal mask. torchtune's
// packed_block_causal_mask.
absl::StatusOr<Tensor> BlockCausalMask(const Batch& batch);

// labels shifted left by one for next-token prediction: out[:, t] = labels[:, t + 1], and
// ignore_index in the last column (torchtune's recipes do this before the loss).
absl::StatusOr<Tensor> ShiftLabels(const Tensor& labels, int32_t ignore_index = kIgnoreIndex);

}  // namespace cctune

#endif  // CCTUNE_DATA_COLLATE_H_
