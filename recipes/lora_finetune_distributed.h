// The distributed LoRA fine-tune (torchtune's recipes/lora_finetune_distributed.py): the LoRA
// strategy (recipes/lora_finetune_single_device.h) run data parallel
// (recipes/data_parallel_strategy.h). The frozen base is replicated on every rank (it has no
// gradient or optimizer state), or with fsdp_shard_frozen_base: true sharded per layer
// (distributed/fsdp.h LayerShardedArena::CreateFrozen, as torchtune's FSDP2 shards it; the
// same bits, 1/N of its memory); only
// the adapters train: after each step's backward their gradient arena (one buffer, a few MB)
// is all-reduced (summed; the loss is normalised by the global token count), and every rank
// makes the same update of its replicated adapters and their optimizer state. Rank 0 writes
// the checkpoints (adapter, merged weights, recipe state with the optimizer state); a resume
// at any world size restores them on every rank.
//
//   mpirun -np 2 bazel-bin/recipes/lora_finetune_distributed --config demo/lora_finetune_distributed
#ifndef CCTUNE_RECIPES_LORA_FINETUNE_DISTRIBUTED_H_
#define CCTUNE_RECIPES_LORA_FINETUNE_DISTRIBUTED_H_

#include "recipes/recipe_main.h"

namespace cctune {

const RecipeEntry& LoRAFinetuneDistributedRecipe();

}  // namespace cctune

#endif  // CCTUNE_RECIPES_LORA_FINETUNE_DISTRIBUTED_H_
