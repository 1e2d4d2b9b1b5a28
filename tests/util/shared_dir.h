// Test helper: locates ../shared (read-only models and tokenizers beside the project).
// Order: $CCTUNE_SHARED_DIR, then <workspace root>/../shared, found through the real path of
// a runfile. Tests that need a file call SharedFile() and GTEST_SKIP() when it is absent.
#ifndef CCTUNE_TESTS_UTIL_SHARED_DIR_H_
#define CCTUNE_TESTS_UTIL_SHARED_DIR_H_

#include <string>

#include "absl/status/statusor.h"

namespace cctune {
namespace testing {

// The workspace (source tree) root, e.g. /work/main.
absl::StatusOr<std::string> WorkspaceRoot();
// The shared folder, or NotFound naming where it looked.
absl::StatusOr<std::string> SharedDir();
// SharedDir() + "/" + relative, or NotFound naming the missing file.
absl::StatusOr<std::string> SharedFile(const std::string& relative);

}  // namespace testing
}  // namespace cctune

#endif  // CCTUNE_TESTS_UTIL_SHARED_DIR_H_
