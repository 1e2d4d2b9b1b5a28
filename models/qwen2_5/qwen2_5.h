// Qwen 2.5 (torchtune.models.qwen2_5) and its component builder qwen2
// (torchtune.models.qwen2.qwen2): biases on q/k/v, RoPE on half-split pairs (the Hugging Face
// layout) with base 1e6; the model builders use RMSNorm eps 1e-6 and tie the output for the
// 0.5B, 1.5B and 3B models.
//
// Qwen2_5Family() describes the builders once; models/registry.h registers them as
// cctune.models.qwen2.qwen2 (the component builder, every torchtune argument),
// cctune.models.qwen2.lora_qwen2, cctune.models.qwen2_5.<model> and
// cctune.models.qwen2_5.lora_<model> (torchtune.models.* too). Sizes in DecoderSizes order:
// vocab_size, num_layers, num_heads, num_kv_heads, embed_dim, intermediate_dim, max_seq_len.
#ifndef CCTUNE_MODELS_QWEN2_5_QWEN2_5_H_
#define CCTUNE_MODELS_QWEN2_5_QWEN2_5_H_

#include <memory>

#include "absl/status/statusor.h"
#include "models/decoder_builder.h"
#include "models/model_builder.h"
#include "modules/transformer_decoder.h"

namespace cctune {

// The component builder's defaults (torchtune's qwen2(...) keyword defaults).
DecoderConfig Qwen2_5Defaults();
const ModelFamily& Qwen2_5Family();

// Model builders: their numbers, and the plain decoder.
DecoderConfig Qwen2_5_0_5BConfig();
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Qwen2_5_0_5B();
DecoderConfig Qwen2_5_1_5B_BaseConfig();
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Qwen2_5_1_5B_Base();
DecoderConfig Qwen2_5_1_5B_InstructConfig();
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Qwen2_5_1_5B_Instruct();
DecoderConfig Qwen2_5_3BConfig();
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Qwen2_5_3B();
DecoderConfig Qwen2_5_7B_BaseConfig();
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Qwen2_5_7B_Base();
DecoderConfig Qwen2_5_7B_InstructConfig();
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Qwen2_5_7B_Instruct();

}  // namespace cctune

#endif  // CCTUNE_MODELS_QWEN2_5_QWEN2_5_H_
