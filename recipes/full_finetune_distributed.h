// The distributed full fine-tune (torchtune's recipes/full_finetune_distributed.py): the full
// fine-tune strategy (recipes/full_finetune_single_device.h) run data parallel
// (recipes/data_parallel_strategy.h) with the optimizer state and the reduced gradients
// sharded across the ranks (distributed/fsdp.h): each rank keeps 1/N of every arena buffer's
// optimizer moments (and f32 master copy) and of the summed gradients, the buffers padded to a
// multiple of N. Per step each rank runs forward and backward on its batch_size samples into
// its local gradient arena, the arena is reduce-scattered (summed; the loss is normalised by
// the global token count, so the sum is the global batch's gradient), the norm and clipping
// are over every rank's shard, each rank updates its shard, and the shards are all-gathered
// back into every rank's weights.
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
