// The full fine-tune recipe (torchtune's recipes/full_finetune_single_device.py): every
// parameter of the model is trained with TrainStep (gradient accumulation, global-norm
// clipping, AdamW/SGD, cosine schedule), logging loss, lr, tokens/sec, grad norm and peak
// memory every log_every_n_steps. Checkpoints go to <output_dir>/step_<N>/ (model weights in
// HF layout: config.json + model.safetensors; recipe_state.safetensors with the optimizer
// moments, RNG state, data-loader position and step) every save_every_n_steps and at each
// epoch end; <output_dir>/LATEST (written atomically, after the directory is complete) names
// the newest one, so a crash leaves the previous checkpoint usable. resume_from_checkpoint:
// true continues from LATEST bit-identically. A non-finite loss stops the run with an error
// naming the step and the last good checkpoint.
//
//   bazel run //recipes:full_finetune_single_device -- --config demo/full_finetune
#ifndef CCTUNE_RECIPES_FULL_FINETUNE_SINGLE_DEVICE_H_
#define CCTUNE_RECIPES_FULL_FINETUNE_SINGLE_DEVICE_H_

#include <memory>

#include "recipes/finetune_recipe.h"
#include "recipes/recipe_main.h"

namespace cctune {

// The recipe for RecipeMain and `cctune run`: its keys (docs/config_reference.md,
// "Recipe keys: full_finetune_single_device"), validation and run (recipes/finetune_recipe.h).
const RecipeEntry& FullFinetuneRecipe();

// Its strategy: every parameter trains; a checkpoint holds the HF weights. For recipes that
// reuse it through a StrategyDecorator (recipes/finetune_recipe.h).
std::unique_ptr<FinetuneStrategy> MakeFullFinetuneStrategy();

}  // namespace cctune

#endif  // CCTUNE_RECIPES_FULL_FINETUNE_SINGLE_DEVICE_H_
