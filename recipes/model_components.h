// Model components for recipes: every builder of models/registry.h
// (cctune.models.<family>.<builder>, torchtune.models.* spellings too) as a config component
// of kind "model". The config node's other keys are the builder's keyword arguments; keys it
// leaves out may come from the checkpoint (a llama2.c header gives all of
// cctune.models.llama2c.llama2c's), which the recipe passes to Instantiate.
#ifndef CCTUNE_RECIPES_MODEL_COMPONENTS_H_
#define CCTUNE_RECIPES_MODEL_COMPONENTS_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "config/registry.h"
#include "models/registry.h"
#include "modules/transformer_decoder.h"

namespace cctune {

// Factories get the builder arguments the checkpoint implies (may be empty).
using ModelComponentRegistryT = Registry<std::unique_ptr<TransformerDecoder>, const ModelArgs&>;
// Component kind "model".
ModelComponentRegistryT& ModelComponentRegistry();

// Registers every builder of ModelRegistry::Global() (idempotent, thread-safe).
absl::Status RegisterModelComponents();

// Registers builder `name` of ModelRegistry::Global() as a model component (for builders
// added after RegisterModelComponents, e.g. the LoRA ones). Its arguments are scalars, or
// with `list_args` also lists, passed to the builder joined by "," (LoRA's
// lora_attn_modules: [q_proj, v_proj] -> "q_proj,v_proj").
absl::Status RegisterModelComponent(const std::string& name, bool list_args = false);

}  // namespace cctune

#endif  // CCTUNE_RECIPES_MODEL_COMPONENTS_H_
