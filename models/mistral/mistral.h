// Mistral: component builder Mistral() and the 7B model builder (torchtune.models.mistral).
// GQA 32/8, RoPE base 10000 on interleaved pairs.
#ifndef CCTUNE_MODELS_MISTRAL_MISTRAL_H_
#define CCTUNE_MODELS_MISTRAL_MISTRAL_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "modules/transformer_decoder.h"

namespace cctune {

absl::StatusOr<std::unique_ptr<TransformerDecoder>> Mistral(
    int64_t vocab_size, int64_t num_layers, int64_t num_heads, int64_t num_kv_heads,
    int64_t embed_dim, int64_t intermediate_dim, int64_t max_seq_len, float norm_eps = 1e-5f,
    double rope_base = 10000.0);

absl::StatusOr<std::unique_ptr<TransformerDecoder>> Mistral_7B();

}  // namespace cctune

#endif  // CCTUNE_MODELS_MISTRAL_MISTRAL_H_
