// The cctune command line (see recipes/cli.h). Put the binary on PATH:
//   bazel build //recipes:cctune && cp bazel-bin/recipes/cctune ~/.local/bin/
#include <string>
#include <vector>

#include "recipes/cli.h"
#include "recipes/working_directory.h"

int main(int argc, char** argv) {
  cctune::ChdirToUserWorkingDirectory();
  return cctune::CctuneMain(std::vector<std::string>(argv + 1, argv + argc));
}
