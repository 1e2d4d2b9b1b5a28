// Llama 3 (torchtune.models.llama3): RoPE on interleaved pairs, base 500000, no frequency
// scaling.
//
// Llama3Family() describes the builders once; models/registry.h registers them as
// cctune.models.llama3.llama3 (the component builder, every torchtune argument),
// cctune.models.llama3.lora_llama3, cctune.models.llama3.<model> and
// cctune.models.llama3.lora_<model> (torchtune.models.* too). Sizes in DecoderSizes order:
// vocab_size, num_layers, num_heads, num_kv_heads, embed_dim, intermediate_dim, max_seq_len.
#ifndef CCTUNE_MODELS_LLAMA3_LLAMA3_H_
#define CCTUNE_MODELS_LLAMA3_LLAMA3_H_

#include <memory>

#include "absl/status/statusor.h"
#include "models/decoder_builder.h"
#include "models/model_builder.h"
#include "modules/transformer_decoder.h"

namespace cctune {

// The component builder's defaults (torchtune's llama3(...) keyword defaults).
DecoderConfig Llama3Defaults();
const ModelFamily& Llama3Family();

// Model builders: their numbers, and the plain decoder.
DecoderConfig Llama3_8BConfig();
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama3_8B();
DecoderConfig Llama3_70BConfig();
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama3_70B();

}  // namespace cctune

#endif  // CCTUNE_MODELS_LLAMA3_LLAMA3_H_
