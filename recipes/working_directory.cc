#include "recipes/working_directory.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace cctune {

void ChdirToUserWorkingDirectory() {
  const char* dir = std::getenv("BUILD_WORKING_DIRECTORY");
  if (dir == nullptr || *dir == '\0') return;
  if (chdir(dir) != 0) std::fprintf(stderr, "warning: cannot change into %s\n", dir);
}

}  // namespace cctune
