// Models from a Hugging Face checkpoint's own config.json, with no builder written:
// model_type llama, mistral or qwen2; hidden_size, num_hidden_layers, num_attention_heads,
// num_key_value_heads, intermediate_size, vocab_size, head_dim, max_position_embeddings,
// rope_theta, rope_scaling (rope_type "default" or "llama3" with factor, low_freq_factor,
// high_freq_factor, original_max_position_embeddings), rms_norm_eps, tie_word_embeddings,
// attention_bias (qwen2: q/k/v biases always). An unsupported model_type, or a field value the
// decoder cannot honour (rope_scaling yarn, hidden_act gelu, an o_proj or MLP bias, a sliding
// window shorter than the context), is an error naming the file, field and value.
//
// Registered as model components (torchtune.models.* spellings too):
//   cctune.models.from_config_json       path: config.json or its directory; default the
//                                        checkpointer's checkpoint_dir
//   cctune.models.lora_from_config_json  the same plus the LoRA keys (models/model_builder.h)
// both with max_seq_len (default max_position_embeddings).
//
// RoPE pairs: qwen2 rotates half-split pairs (Hugging Face's layout, as torchtune's qwen2);
// llama and mistral interleaved ones, which the HF checkpointer's q/k permutation produces
// (model_type LLAMA*/MISTRAL there; QWEN2 for qwen2, which the component checks when the
// checkpointer passes its model_type).
#ifndef CCTUNE_MODELS_HF_CONFIG_HF_CONFIG_H_
#define CCTUNE_MODELS_HF_CONFIG_HF_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/decoder_builder.h"

namespace cctune {

// The decoder config.json `json` describes; `file` names it in errors. `max_seq_len`, when
// given, replaces max_position_embeddings.
absl::StatusOr<DecoderConfig> DecoderConfigFromHfJson(
    absl::string_view json, const std::string& file = "config.json",
    std::optional<int64_t> max_seq_len = std::nullopt);
// Reads `path` (config.json, or a directory holding one).
absl::StatusOr<DecoderConfig> ReadHfDecoderConfig(
    const std::string& path, std::optional<int64_t> max_seq_len = std::nullopt);

// Registers the two components above (idempotent, thread-safe).
absl::Status RegisterHfConfigModels();

}  // namespace cctune

#endif  // CCTUNE_MODELS_HF_CONFIG_HF_CONFIG_H_
