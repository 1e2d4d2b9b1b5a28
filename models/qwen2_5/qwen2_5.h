// Qwen 2.5: the Qwen2 component builder and the Qwen 2.5 model builders
// (torchtune.models.qwen2 / torchtune.models.qwen2_5). Biases on q/k/v projections, RoPE on
// half-split pairs (Hugging Face layout) with base 1e6, RMSNorm eps 1e-6 in the model builders,
// tied output for the 0.5B, 1.5B and 3B models.
#ifndef CCTUNE_MODELS_QWEN2_5_QWEN2_5_H_
#define CCTUNE_MODELS_QWEN2_5_QWEN2_5_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "modules/transformer_decoder.h"

namespace cctune {

absl::StatusOr<std::unique_ptr<TransformerDecoder>> Qwen2(
    int64_t vocab_size, int64_t num_layers, int64_t num_heads, int64_t num_kv_heads,
    int64_t embed_dim, int64_t intermediate_dim, int64_t max_seq_len, float norm_eps = 1e-5f,
    double rope_base = 1000000.0, bool tie_word_embeddings = false);

absl::StatusOr<std::unique_ptr<TransformerDecoder>> Qwen2_5_0_5B();
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Qwen2_5_1_5B_Base();
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Qwen2_5_1_5B_Instruct();
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Qwen2_5_3B();
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Qwen2_5_7B_Base();
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Qwen2_5_7B_Instruct();

}  // namespace cctune

#endif  // CCTUNE_MODELS_QWEN2_5_QWEN2_5_H_
