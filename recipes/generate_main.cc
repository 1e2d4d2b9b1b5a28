// bazel run //recipes:generate -- --config <name or path> [key=value ...]
#include "recipes/generate_recipe.h"

int main(int argc, char** argv) {
  return cctune::RecipeBinaryMain(cctune::GenerateRecipe(), argc, argv);
}
