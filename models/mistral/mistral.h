// Mistral (torchtune.models.mistral): GQA, RoPE on interleaved pairs with base 10000.
//
// MistralFamily() describes the builders once; models/registry.h registers them as
// cctune.models.mistral.mistral (the component builder, every torchtune argument),
// cctune.models.mistral.lora_mistral, cctune.models.mistral.<model> and
// cctune.models.mistral.lora_<model> (torchtune.models.* too). Sizes in DecoderSizes order:
// vocab_size, num_layers, num_heads, num_kv_heads, embed_dim, intermediate_dim, max_seq_len.
#ifndef CCTUNE_MODELS_MISTRAL_MISTRAL_H_
#define CCTUNE_MODELS_MISTRAL_MISTRAL_H_

#include <memory>

#include "absl/status/statusor.h"
#include "models/decoder_builder.h"
#include "models/model_builder.h"
#include "modules/transformer_decoder.h"

namespace cctune {

// The component builder's defaults (torchtune's mistral(...) keyword defaults).
DecoderConfig MistralDefaults();
const ModelFamily& MistralFamily();

// Model builders: their numbers, and the plain decoder.
DecoderConfig Mistral_7BConfig();
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Mistral_7B();

}  // namespace cctune

#endif  // CCTUNE_MODELS_MISTRAL_MISTRAL_H_
