// Llama 3.2 text (torchtune.models.llama3_2): Llama3ScaledRoPE with scale_factor 32; the
// output projection is tied to the token embedding by default (TiedLinear), so the state dict
// has no output.weight.
//
// Llama3_2Family() describes the builders once; models/registry.h registers them as
// cctune.models.llama3_2.llama3_2 (the component builder, every torchtune argument),
// cctune.models.llama3_2.lora_llama3_2, cctune.models.llama3_2.<model> and
// cctune.models.llama3_2.lora_<model> (torchtune.models.* too). Sizes in DecoderSizes order:
// vocab_size, num_layers, num_heads, num_kv_heads, embed_dim, intermediate_dim, max_seq_len.
#ifndef CCTUNE_MODELS_LLAMA3_2_LLAMA3_2_H_
#define CCTUNE_MODELS_LLAMA3_2_LLAMA3_2_H_

#include <memory>

#include "absl/status/statusor.h"
#include "models/decoder_builder.h"
#include "models/model_builder.h"
#include "modules/transformer_decoder.h"

namespace cctune {

// The component builder's defaults (torchtune's llama3_2(...) keyword defaults).
DecoderConfig Llama3_2Defaults();
const ModelFamily& Llama3_2Family();

// Model builders: their numbers, and the plain decoder.
DecoderConfig Llama3_2_1BConfig(bool tie_word_embeddings = true);
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama3_2_1B(bool tie_word_embeddings = true);
DecoderConfig Llama3_2_3BConfig(bool tie_word_embeddings = true);
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama3_2_3B(bool tie_word_embeddings = true);

}  // namespace cctune

#endif  // CCTUNE_MODELS_LLAMA3_2_LLAMA3_2_H_
