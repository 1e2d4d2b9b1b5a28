// Llama 2 (torchtune.models.llama2): RoPE on interleaved pairs with base 10000, the SwiGLU
// hidden size from ScaleHiddenDimForMlp unless given.
//
// Llama2Family() describes the builders once; models/registry.h registers them as
// cctune.models.llama2.llama2 (the component builder, every torchtune argument),
// cctune.models.llama2.lora_llama2, cctune.models.llama2.<model> and
// cctune.models.llama2.lora_<model> (torchtune.models.* too). Sizes in DecoderSizes order:
// vocab_size, num_layers, num_heads, num_kv_heads, embed_dim, intermediate_dim, max_seq_len.
#ifndef CCTUNE_MODELS_LLAMA2_LLAMA2_H_
#define CCTUNE_MODELS_LLAMA2_LLAMA2_H_

#include <memory>

#include "absl/status/statusor.h"
#include "models/decoder_builder.h"
#include "models/model_builder.h"
#include "modules/transformer_decoder.h"

namespace cctune {

// The component builder's defaults (torchtune's llama2(...) keyword defaults).
DecoderConfig Llama2Defaults();
const ModelFamily& Llama2Family();

// Model builders: their numbers, and the plain decoder.
DecoderConfig Llama2_7BConfig();
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama2_7B();
DecoderConfig Llama2_13BConfig();
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama2_13B();
DecoderConfig Llama2_70BConfig();
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama2_70B();

}  // namespace cctune

#endif  // CCTUNE_MODELS_LLAMA2_LLAMA2_H_
