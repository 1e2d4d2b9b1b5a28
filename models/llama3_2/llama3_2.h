// Llama 3.2 (text): component builder Llama3_2() and model builders
// (torchtune.models.llama3_2). Llama3ScaledRoPE with factor 32; the output projection is tied
// to the token embedding by default (TiedLinear), so the state dict has no output.weight.
#ifndef CCTUNE_MODELS_LLAMA3_2_LLAMA3_2_H_
#define CCTUNE_MODELS_LLAMA3_2_LLAMA3_2_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "modules/transformer_decoder.h"

namespace cctune {

// intermediate_dim = 0 means ScaleHiddenDimForMlp(embed_dim).
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama3_2(
    int64_t vocab_size, int64_t num_layers, int64_t num_heads, int64_t num_kv_heads,
    int64_t embed_dim, int64_t max_seq_len, int64_t intermediate_dim = 0, float norm_eps = 1e-5f,
    double rope_base = 500000.0, double scale_factor = 32.0, bool tie_word_embeddings = true);

absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama3_2_1B(bool tie_word_embeddings = true);
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama3_2_3B(bool tie_word_embeddings = true);

}  // namespace cctune

#endif  // CCTUNE_MODELS_LLAMA3_2_LLAMA3_2_H_
