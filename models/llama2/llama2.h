// Llama 2: component builder Llama2() and model builders (torchtune.models.llama2).
// RoPE on interleaved pairs, base 10000; SwiGLU hidden dim from ScaleHiddenDimForMlp by default.
#ifndef CCTUNE_MODELS_LLAMA2_LLAMA2_H_
#define CCTUNE_MODELS_LLAMA2_LLAMA2_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "modules/transformer_decoder.h"

namespace cctune {

// intermediate_dim = 0 means ScaleHiddenDimForMlp(embed_dim).
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama2(int64_t vocab_size, int64_t num_layers,
                                                           int64_t num_heads, int64_t num_kv_heads,
                                                           int64_t embed_dim, int64_t max_seq_len,
                                                           int64_t intermediate_dim = 0,
                                                           float norm_eps = 1e-5f,
                                                           double rope_base = 10000.0);

absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama2_7B();
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama2_13B();
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama2_70B();

}  // namespace cctune

#endif  // CCTUNE_MODELS_LLAMA2_LLAMA2_H_
