// The distributed full fine-tune (torchtune's recipes/full_finetune_distributed.py): the full
// fine-tune strategy (recipes/full_finetune_single_device.h) run data parallel
// (recipes/data_parallel_strategy.h) and fully sharded (distributed/fsdp.h LayerShardedArena,
// docs/distributed.md "What is sharded"): each rank keeps 1/N of every layer's weights, of the
// reduced gradients and of the optimizer state. Per micro-batch each layer's weights are
// all-gathered before its forward (the next layer's gather started early) and, after a
// reshard (fsdp_reshard_after_forward), again before its backward; its gradients are
// reduce-scattered (summed; the loss is normalised by the global token count) after its
// backward. The norm and clipping are over every rank's shard, and each rank updates its
// shard (any N: uneven units give the last ranks shorter shards). Where per-layer units do not
// fit (mixed dtypes in one arena) the optimizer
// state and reduced gradients of whole buffers are sharded instead (ShardedArena).
//
// Checkpoints (<output_dir>/step_<N>/): the consolidated HF weights and the recipe state
// (step, RNG, loader position), written by rank 0 alone, plus
// optimizer_shard_<r>_of_<N>.safetensors from each rank; LATEST is moved (atomically) after
// every rank's shard is on disk. A resume at the same world size is bit-identical; at another
// one the optimizer shards are resharded (keep the global batch: batch_size x ranks).
//
//   mpirun -np 2 bazel-bin/recipes/full_finetune_distributed --config demo/full_finetune_distributed
#ifndef CCTUNE_RECIPES_FULL_FINETUNE_DISTRIBUTED_H_
#define CCTUNE_RECIPES_FULL_FINETUNE_DISTRIBUTED_H_

#include "recipes/recipe_main.h"

namespace cctune {

// The file each rank of a run of `world_size` ranks writes its optimizer shard to.
std::string OptimizerShardFile(int rank, int world_size);

const RecipeEntry& FullFinetuneDistributedRecipe();

}  // namespace cctune

#endif  // CCTUNE_RECIPES_FULL_FINETUNE_DISTRIBUTED_H_
