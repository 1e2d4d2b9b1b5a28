// The generate recipe (torchtune's recipes/generate.py): load a checkpoint into a model,
// tokenize prompt.system / prompt.user with the tokenizer's prompt template, generate, and
// print the decoded text (prompt followed by generation) on stdout. stderr gets the resolved
// config, then the figures documented in docs/generation.md:
//   Time for inference: %.02f sec total, %.02f tokens/sec
//   Bandwidth achieved: %.02f GB/s
//   Memory used: %.02f GB
//   KV cache: <bytes> bytes (%.02f GB), layout <grouped|expanded|none>, ...
//
//   bazel run //recipes:generate -- --config llama2c/generation prompt.user="Zoo" temperature=0
#ifndef CCTUNE_RECIPES_GENERATE_RECIPE_H_
#define CCTUNE_RECIPES_GENERATE_RECIPE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/checkpointer_components.h"
#include "config/config.h"
#include "config/node.h"
#include "config/schema.h"
#include "modules/transformer_decoder.h"
#include "recipes/recipe_main.h"

namespace cctune {

// The recipe's top-level keys (docs/config_reference.md, "Recipe keys: generate").
const Schema& GenerateRecipeSchema();

// Registers the model, checkpointer and tokenizer components the recipe instantiates.
absl::Status RegisterGenerateComponents();

// Every problem of `config` (resolved or not): Validate() against the schema and the
// registered components, plus checkpoint files that do not exist. Builds nothing.
std::vector<ConfigError> ValidateGenerateConfig(const Config& config);

// The run's checkpoint (into `ckpt`) and model, `root` with the recipe's defaults: the
// checkpoint loaded with q/k in the file's order, the model (quantized form with a
// `quantizer`) built once, and, where the checkpoint's q/k are half-split but the model
// rotates half-split pairs of its own accord, the checkpoint reloaded permuted for the same
// model; then ckpt.state_dict quantized at load where asked (once).
absl::StatusOr<std::unique_ptr<TransformerDecoder>> LoadGenerateModel(const ConfigNode& root,
                                                                     Checkpointer& checkpointer,
                                                                     LoadedCheckpoint& ckpt);

// Runs the recipe on a resolved, valid config.
absl::Status RunGenerateRecipe(const Config& config);

// The recipe for RecipeMain and `cctune run` (--help adds the prompt keys).
const RecipeEntry& GenerateRecipe();

}  // namespace cctune

#endif  // CCTUNE_RECIPES_GENERATE_RECIPE_H_
