// Model components: builders registered through config/registry.h under torchtune's names
// ("cctune.models.llama3_2.llama3_2_1b"; "torchtune.models.llama3_2.llama3_2_1b" resolves to
// it), each with a typed Schema, as torchtune's `_component_` paths name them.
//
// A family describes itself once, in models/<family>/<family>.yaml (ParseModelFamily makes it
// a ModelFamily): its component builder's torchtune arguments and defaults, and its model
// builders as calls of the component builder. RegisterModelFamily then
// registers, under both spellings,
//   <component>.<component>       the component builder, every torchtune argument
//   <component>.lora_<component>  the same plus the LoRA arguments
//   <family>.<model>              each model builder (with the few arguments torchtune gives it)
//   <family>.lora_<model>         each model builder plus the LoRA arguments
// All of them build through BuildDecoder (models/decoder_builder.h), the LoRA ones with
// LoRAProjections (models/lora.h).
//
// Factories get, besides their config node, what the checkpoint says about the model (a map
// of builder keys, typed; null when the checkpoint says nothing): keys the config node leaves
// out are taken from it (a llama2.c header gives cctune.models.llama2c.llama2c all of its
// keys), then from the builder's defaults.
#ifndef CCTUNE_MODELS_MODEL_BUILDER_H_
#define CCTUNE_MODELS_MODEL_BUILDER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "config/node.h"
#include "config/registry.h"
#include "config/schema.h"
#include "models/decoder_builder.h"
#include "models/lora.h"
#include "modules/transformer_decoder.h"

namespace cctune {

// Component kind "model"; the extra argument is the checkpoint's map of builder keys.
using ModelComponentRegistryT = Registry<std::unique_ptr<TransformerDecoder>, const ConfigNode&>;
ModelComponentRegistryT& ModelComponentRegistry();

// The value of builder key `key`: the config node's (when present and not null), else the
// checkpoint's, else nullptr.
const ConfigNode* BuilderArg(const ConfigNode& node, const ConfigNode& from_checkpoint,
                             absl::string_view key);

// Turns a builder's config node (and the checkpoint's keys) into the decoder's numbers.
using DecoderConfigFn = std::function<absl::StatusOr<DecoderConfig>(
    const ConfigNode& node, const ConfigNode& from_checkpoint)>;

// Registers `name` ("cctune.models.<module>.<builder>"): BuildDecoder(make(node, checkpoint)).
absl::Status RegisterModelBuilder(std::string name, Schema schema, DecoderConfigFn make);
// Registers `name` with the LoRA arguments added to `schema` (lora_attn_modules, required when
// `attn_modules_required` as in torchtune, else defaulting to [q_proj, v_proj];
// apply_lora_to_mlp, apply_lora_to_output, lora_rank, lora_alpha, lora_dropout; use_dora,
// Unimplemented when true; quantize_base, QLoRA's NF4 base, defaulting to
// `quantize_base_default`, true for the qlora_ builders): BuildLoRADecoder(make(...), options).
absl::Status RegisterLoRAModelBuilder(std::string name, Schema schema, DecoderConfigFn make,
                                      bool attn_modules_required = true,
                                      bool quantize_base_default = false);

// The LoRA options of a lora_ builder's node. Errors name the key and value.
absl::StatusOr<LoRAOptions> ReadLoRAOptions(const ConfigNode& node);

// The torchtune component-builder arguments a family may take, with the DecoderConfig field
// each sets: vocab_size, num_layers, num_heads, num_kv_heads, embed_dim, max_seq_len,
// intermediate_dim (null: ScaleHiddenDimForMlp(embed_dim)), attn_dropout (only 0),
// norm_eps, rope_base, scale_factor (the Llama 3.1 RoPE scaling factor), tie_word_embeddings,
// q_proj_bias, k_proj_bias, v_proj_bias (all equal), q_norm, k_norm (only false).
bool IsDecoderArg(absl::string_view key);

// A model builder: fixed numbers, a few of which its arguments may change.
struct ModelPreset {
  std::string name;  // "llama3_2_1b"
  std::string doc;
  DecoderConfig config;
  std::vector<std::string> args;  // decoder args the builder accepts (default: its numbers)
  // What the model's publisher or torchtune counts (0: not stated): parameters, and tensors
  // in the state dict. registry_test checks every built-in model against them.
  int64_t published_parameters = 0;
  int64_t published_tensors = 0;
  // torchtune has a qlora_ twin of this builder (its lora_ one with quantize_base=True).
  bool qlora = false;
};

// A family: torchtune's _component_builders.py and _model_builders.py in one description.
struct ModelFamily {
  std::string name;       // module of the model builders: cctune.models.<name>.*
  std::string component;  // the component builder, in module cctune.models.<component>; "": none
  std::string doc;
  // The component builder's arguments in torchtune's order: those without a default, then
  // those with one (the default is `defaults`'s value).
  std::vector<std::string> required_args;
  std::vector<std::string> optional_args;
  // Defaults of the optional arguments, and what no argument sets (RoPE pairing, ...).
  DecoderConfig defaults;
  std::vector<ModelPreset> models;
  // torchtune's lora_ builders require lora_attn_modules; others may default it.
  bool lora_attn_modules_required = true;
};

// Reads a family file (models/<family>/<family>.yaml; docs/adding_a_model.md):
//   family: llama3_2              module of the model builders
//   component: llama3_2           the component builder (omit for none)
//   doc: Llama 3.2 (text)
//   required: [vocab_size, ...]   its arguments without a default, in torchtune's order
//   defaults: {attn_dropout: 0.0, ...}  the others, with their defaults, in order
//   fixed: {rope_pairing: half_split}   decoder settings no argument changes
//   models:                       the model builders: the component builder's arguments
//     llama3_2_1b: {doc: ..., call: {vocab_size: 128256, ...}, args: [tie_word_embeddings],
//                   published: {parameters: 1235814400, tensors: 146}, qlora: true}
// Every key and value is checked (unknown decoder arguments, types, ranges, a model builder
// leaving out a required argument), each error with file:line.
absl::StatusOr<ModelFamily> ParseModelFamily(absl::string_view yaml, const std::string& file);

// Registers the family's component builder, its lora_ version, every model builder and its
// lora_ version, and the qlora_ version of those marked qlora (AlreadyExists when a name is
// taken).
absl::Status RegisterModelFamily(const ModelFamily& family);

// The DecoderConfig registered builder `name` (either spelling) makes from builder keys `args`
// (a map; null: none), checked as a config's model node would be: for C++ code and tests that
// want a builder's numbers (e.g. to build it with their own ProjectionFactory).
absl::StatusOr<DecoderConfig> ModelConfig(absl::string_view name,
                                          const ConfigNode& args = ConfigNode(),
                                          const ConfigNode& from_checkpoint = ConfigNode());

}  // namespace cctune

#endif  // CCTUNE_MODELS_MODEL_BUILDER_H_
