// mpirun -np N bazel-bin/recipes/lora_finetune_distributed --config <name or path> [key=value ...]
// (or `cctune run --nproc_per_node N lora_finetune_distributed ...`)
#include "recipes/lora_finetune_distributed.h"

int main(int argc, char** argv) {
  return cctune::RecipeBinaryMain(cctune::LoRAFinetuneDistributedRecipe(), argc, argv);
}
