// Test helpers for running the recipe binaries: run a program and capture its exit code,
// stdout and stderr separately; locate runfiles; read the files a run wrote.
#ifndef CCTUNE_TESTS_SUBPROCESS_H_
#define CCTUNE_TESTS_SUBPROCESS_H_

#include <string>
#include <vector>

namespace cctune {
namespace testing {

struct ProcessResult {
  int exit_code = -1;  // -1: could not run, or killed by a signal
  std::string out;
  std::string err;
};

// argv[0] is the program path. The child runs in `cwd` when it is not empty.
ProcessResult RunProcess(const std::vector<std::string>& argv, const std::string& cwd = "");

// A binary of this workspace from the test's runfiles, e.g. RunfilePath("recipes/generate").
std::string RunfilePath(const std::string& workspace_relative);

// The whole file (empty when it cannot be read): for the files a recipe run wrote.
std::string ReadFile(const std::string& path);

}  // namespace testing
}  // namespace cctune

#endif  // CCTUNE_TESTS_SUBPROCESS_H_
