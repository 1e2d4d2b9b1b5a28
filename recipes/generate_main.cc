// bazel run //recipes:generate -- --config <path or built-in name> [key=value ...]
#include <string>
#include <vector>

#include "recipes/generate_recipe.h"
#include "recipes/working_directory.h"

int main(int argc, char** argv) {
  cctune::ChdirToUserWorkingDirectory();
  return cctune::GenerateMain(std::vector<std::string>(argv + 1, argv + argc));
}
