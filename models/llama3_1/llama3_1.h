// Llama 3.1 (torchtune.models.llama3_1): as Llama 3, with Llama3ScaledRoPE (scale_factor 8,
// low/high frequency factors 1/4, original context 8192) and a 131072-token context.
//
// Llama3_1Family() describes the builders once; models/registry.h registers them as
// cctune.models.llama3_1.llama3_1 (the component builder, every torchtune argument),
// cctune.models.llama3_1.lora_llama3_1, cctune.models.llama3_1.<model> and
// cctune.models.llama3_1.lora_<model> (torchtune.models.* too). Sizes in DecoderSizes order:
// vocab_size, num_layers, num_heads, num_kv_heads, embed_dim, intermediate_dim, max_seq_len.
#ifndef CCTUNE_MODELS_LLAMA3_1_LLAMA3_1_H_
#define CCTUNE_MODELS_LLAMA3_1_LLAMA3_1_H_

#include <memory>

#include "absl/status/statusor.h"
#include "models/decoder_builder.h"
#include "models/model_builder.h"
#include "modules/transformer_decoder.h"

namespace cctune {

// The component builder's defaults (torchtune's llama3_1(...) keyword defaults).
DecoderConfig Llama3_1Defaults();
const ModelFamily& Llama3_1Family();

// Model builders: their numbers, and the plain decoder.
DecoderConfig Llama3_1_8BConfig();
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama3_1_8B();
DecoderConfig Llama3_1_70BConfig();
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama3_1_70B();
DecoderConfig Llama3_1_405BConfig();
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama3_1_405B();

}  // namespace cctune

#endif  // CCTUNE_MODELS_LLAMA3_1_LLAMA3_1_H_
