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

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "config/config.h"
#include "config/node.h"
#include "config/schema.h"
#include "recipes/recipe_main.h"

namespace cctune {

// The recipe's top-level keys (docs/config_reference.md, "Recipe keys: generate").
const Schema& GenerateRecipeSchema();

// Registers the model, checkpointer and tokenizer components the recipe instantiates.
absl::Status RegisterGenerateComponents();

// Every problem of `config` (resolved or not): Validate() against the schema and the
// registered components, plus checkpoint files that do not exist. Builds nothing.
std::vector<ConfigError> ValidateGenerateConfig(const Config& config);

// Runs the recipe on a resolved, valid config.
absl::Status RunGenerateRecipe(const Config& config);

// The recipe for RecipeMain and `cctune run` (--help adds the prompt keys).
const RecipeEntry& GenerateRecipe();

}  // namespace cctune

#endif  // CCTUNE_RECIPES_GENERATE_RECIPE_H_
