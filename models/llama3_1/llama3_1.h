// Llama 3.1: component builder Llama3_1() and model builders (torchtune.models.llama3_1).
// As Llama 3, with Llama3ScaledRoPE (factor 8, low/high freq factors 1/4, original context
// 8192) and a 131072-token context.
#ifndef CCTUNE_MODELS_LLAMA3_1_LLAMA3_1_H_
#define CCTUNE_MODELS_LLAMA3_1_LLAMA3_1_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "modules/transformer_decoder.h"

namespace cctune {

// intermediate_dim = 0 means ScaleHiddenDimForMlp(embed_dim).
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama3_1(
    int64_t vocab_size, int64_t num_layers, int64_t num_heads, int64_t num_kv_heads,
    int64_t embed_dim, int64_t max_seq_len, int64_t intermediate_dim = 0, float norm_eps = 1e-5f,
    double rope_base = 500000.0, double scale_factor = 8.0);

absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama3_1_8B();
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama3_1_70B();
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama3_1_405B();

}  // namespace cctune

#endif  // CCTUNE_MODELS_LLAMA3_1_LLAMA3_1_H_
