// The LoRA fine-tune recipe (torchtune's recipes/lora_finetune_single_device.py): the same
// keys and training loop as recipes/full_finetune_single_device, with a LoRA model builder
// (torchtune.models.llama3_2.lora_llama3_2_1b ..., cctune.models.tiny.lora_tiny_llama; keys
// lora_attn_modules, apply_lora_to_mlp, apply_lora_to_output, lora_rank, lora_alpha,
// lora_dropout: dropout on each adapter's input in training, masks from the seeded generator
// whose state the checkpoints save). Base weights load from the checkpointer with the adapter
// names missing (strict=false for them only) and stay frozen: only adapter parameters get
// gradients and optimizer state. Each checkpoint <output_dir>/step_<N>/ holds the PEFT adapter
// (adapter_model.safetensors + adapter_config.json), the merged full weights in HF layout
// (config.json + model.safetensors: W + alpha/rank * B.A) and recipe_state.safetensors;
// <output_dir>/LATEST names the newest. resume_from_checkpoint: true reloads the base from the
// checkpointer and the adapters from LATEST and continues bit-identically. QLoRA (a qlora_
// builder, or quantize_base: true): the attention and MLP bases are quantized to NF4 while
// loading (models/qlora.h) and the merged weights are saved from the dequantized base, in
// bf16.
//
//   bazel run //recipes:lora_finetune_single_device -- --config demo/lora_finetune
#ifndef CCTUNE_RECIPES_LORA_FINETUNE_SINGLE_DEVICE_H_
#define CCTUNE_RECIPES_LORA_FINETUNE_SINGLE_DEVICE_H_

#include <memory>

#include "recipes/finetune_recipe.h"
#include "recipes/recipe_main.h"

namespace cctune {

// The recipe for RecipeMain and `cctune run`: its keys (docs/config_reference.md,
// "Recipe keys: lora_finetune_single_device"), validation and run (recipes/finetune_recipe.h).
const RecipeEntry& LoRAFinetuneRecipe();

// Its strategy: only the adapters train; a checkpoint holds the PEFT adapter and the merged
// weights. For recipes that reuse it through a StrategyDecorator (recipes/finetune_recipe.h).
std::unique_ptr<FinetuneStrategy> MakeLoRAFinetuneStrategy();

}  // namespace cctune

#endif  // CCTUNE_RECIPES_LORA_FINETUNE_SINGLE_DEVICE_H_
