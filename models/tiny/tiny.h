// A tiny randomly-initialisable Llama-style model for tests, examples and benchmarks that
// must run in milliseconds: GQA 8/2, head_dim 8, two layers.
#ifndef CCTUNE_MODELS_TINY_TINY_H_
#define CCTUNE_MODELS_TINY_TINY_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "modules/transformer_decoder.h"

namespace cctune {

absl::StatusOr<std::unique_ptr<TransformerDecoder>> TinyLlama(
    int64_t vocab_size = 256, int64_t num_layers = 2, int64_t num_heads = 8,
    int64_t num_kv_heads = 2, int64_t embed_dim = 64, int64_t intermediate_dim = 160,
    int64_t max_seq_len = 256, bool tie_word_embeddings = false);

}  // namespace cctune

#endif  // CCTUNE_MODELS_TINY_TINY_H_
