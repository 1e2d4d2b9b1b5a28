// Sample packing with torchtune's PackedDataset semantics: samples are concatenated greedily,
// in order, into packs of exactly max_seq_len tokens. Each pack records its documents'
// lengths (seq_lens) and every token's position within its document (input_pos), so the
// model can use a block-diagonal causal mask (data/collate.h's BlockCausalMask) and restart
// RoPE positions per document. Packs are padded at the end with pad_id (labels kIgnoreIndex),
// the padding counting as one more document whose positions continue from the last one
// (clamped to max_seq_len - 1).
//
// A sample that does not fit in the current pack starts the next one; with
// split_across_pack it is cut at the boundary instead and continues in the next pack (its
// positions continue too, modulo max_seq_len). A sample longer than max_seq_len is an error
// unless split_across_pack is set. Empty samples are skipped.
#ifndef CCTUNE_DATA_PACKED_DATASET_H_
#define CCTUNE_DATA_PACKED_DATASET_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "data/dataset.h"

namespace cctune {

struct PackOptions {
  int64_t max_seq_len = 0;  // > 0
  int32_t pad_id = 0;
  int64_t max_packs = 0;  // > 0: stop after this many packs
  bool split_across_pack = false;
};

absl::StatusOr<Dataset> PackDataset(const Dataset& dataset, const PackOptions& options);

}  // namespace cctune

#endif  // CCTUNE_DATA_PACKED_DATASET_H_
