// Test helper: runs a program and captures its exit code, stdout and stderr separately.
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

}  // namespace testing
}  // namespace cctune

#endif  // CCTUNE_TESTS_SUBPROCESS_H_
