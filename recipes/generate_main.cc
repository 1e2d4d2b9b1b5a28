// bazel run //recipes:generate -- --config <path or built-in name> [key=value ...]
#include <string>
#include <vector>

#include "recipes/generate_recipe.h"
#include "recipes/main_guard.h"
#include "recipes/working_directory.h"

int main(int argc, char** argv) {
  cctune::ChdirToUserWorkingDirectory();
  const std::vector<std::string> args(argv + 1, argv + argc);
  return cctune::GuardedMain("generate", [&] { return cctune::GenerateMain(args); });
}
