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
// checkpointer and the adapters from LATEST and continues bit-identically.
//
//   bazel run //recipes:lora_finetune_single_device -- --config demo/lora_finetune
#ifndef CCTUNE_RECIPES_LORA_FINETUNE_SINGLE_DEVICE_H_
#define CCTUNE_RECIPES_LORA_FINETUNE_SINGLE_DEVICE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "config/config.h"
#include "config/node.h"
#include "config/schema.h"

namespace cctune {

// The recipe's top-level keys (docs/config_reference.md,
// "Recipe keys: lora_finetune_single_device").
const Schema& LoRAFinetuneRecipeSchema();

// Registers every component kind the recipe instantiates.
absl::Status RegisterLoRAFinetuneComponents();

// Every problem of `config`: schema, components, checkpoint and dataset files that do not exist.
std::vector<ConfigError> ValidateLoRAFinetuneConfig(const Config& config);

// Runs the recipe on a resolved, valid config.
absl::Status RunLoRAFinetuneRecipe(const Config& config);

// --config <path or built-in name> [key=value ...]; returns the process exit code.
int LoRAFinetuneMain(const std::vector<std::string>& args);

}  // namespace cctune

#endif  // CCTUNE_RECIPES_LORA_FINETUNE_SINGLE_DEVICE_H_
