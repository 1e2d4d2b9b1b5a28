// mpirun -np N bazel-bin/recipes/full_finetune_distributed --config <name or path> [key=value ...]
// (or `cctune run --nproc_per_node N full_finetune_distributed ...`)
#include "recipes/full_finetune_distributed.h"

int main(int argc, char** argv) {
  return cctune::RecipeBinaryMain(cctune::FullFinetuneDistributedRecipe(), argc, argv);
}
