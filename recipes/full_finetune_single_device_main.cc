// bazel run //recipes:full_finetune_single_device -- --config <name or path> [key=value ...]
#include "recipes/full_finetune_single_device.h"

int main(int argc, char** argv) {
  return cctune::RecipeBinaryMain(cctune::FullFinetuneRecipe(), argc, argv);
}
