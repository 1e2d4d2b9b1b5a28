// A tiny randomly-initialisable Llama-style model for tests, examples and benchmarks that
// must run in milliseconds: GQA 8/2, head_dim 8, two layers. Registered as
// cctune.models.tiny.tiny_llama and cctune.models.tiny.lora_tiny_llama (whose
// lora_attn_modules defaults to [q_proj, v_proj]), every size an argument.
#ifndef CCTUNE_MODELS_TINY_TINY_H_
#define CCTUNE_MODELS_TINY_TINY_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "models/decoder_builder.h"
#include "models/model_builder.h"
#include "modules/transformer_decoder.h"

namespace cctune {

DecoderConfig TinyLlamaConfig(int64_t vocab_size = 256, int64_t num_layers = 2,
                              int64_t num_heads = 8, int64_t num_kv_heads = 2,
                              int64_t embed_dim = 64, int64_t intermediate_dim = 160,
                              int64_t max_seq_len = 256, bool tie_word_embeddings = false);

absl::StatusOr<std::unique_ptr<TransformerDecoder>> TinyLlama(
    int64_t vocab_size = 256, int64_t num_layers = 2, int64_t num_heads = 8,
    int64_t num_kv_heads = 2, int64_t embed_dim = 64, int64_t intermediate_dim = 160,
    int64_t max_seq_len = 256, bool tie_word_embeddings = false);

const ModelFamily& TinyFamily();

}  // namespace cctune

#endif  // CCTUNE_MODELS_TINY_TINY_H_
