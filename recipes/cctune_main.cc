// The cctune command line (see recipes/cli.h). Put the binary on PATH:
//   bazel build //recipes:cctune && cp bazel-bin/recipes/cctune ~/.local/bin/
#include <string>
#include <vector>

#include "recipes/cli.h"
#include "recipes/main_guard.h"
#include "recipes/working_directory.h"

int main(int argc, char** argv) {
  cctune::ChdirToUserWorkingDirectory();
  const std::vector<std::string> args(argv + 1, argv + argc);
  return cctune::GuardedMain("cctune", [&] { return cctune::CctuneMain(args); });
}
