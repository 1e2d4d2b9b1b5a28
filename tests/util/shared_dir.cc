#include "tests/util/shared_dir.h"

#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace cctune {
namespace testing {
namespace fs = std::filesystem;

absl::StatusOr<std::string> WorkspaceRoot() {
  std::vector<std::string> candidates;
  if (const char* srcdir = std::getenv("TEST_SRCDIR")) {
    candidates.push_back(absl::StrCat(srcdir, "/cctune/tests/util/anchor.txt"));
  }
  candidates.push_back("tests/util/anchor.txt");  // bazel run / working directory
  for (const std::string& c : candidates) {
    std::error_code ec;
    const fs::path real = fs::canonical(c, ec);
    if (!ec) return real.parent_path().parent_path().parent_path().string();
  }
  return absl::NotFoundError("cannot locate the cctune source tree (tests/util/anchor.txt)");
}

absl::StatusOr<std::string> SharedDir() {
  if (const char* env = std::getenv("CCTUNE_SHARED_DIR"); env != nullptr && *env) {
    if (fs::is_directory(env)) return std::string(env);
    return absl::NotFoundError(absl::StrCat("$CCTUNE_SHARED_DIR=", env, " is not a directory"));
  }
  auto root = WorkspaceRoot();
  if (!root.ok()) return root.status();
  const fs::path shared = fs::path(*root).parent_path() / "shared";
  if (fs::is_directory(shared)) return shared.string();
  return absl::NotFoundError(absl::StrCat("no shared folder at ", shared.string()));
}

absl::StatusOr<std::string> SharedFile(const std::string& relative) {
  auto dir = SharedDir();
  if (!dir.ok()) return dir.status();
  const std::string path = absl::StrCat(*dir, "/", relative);
  if (!fs::exists(path)) return absl::NotFoundError(absl::StrCat("missing shared file ", path));
  return path;
}

}  // namespace testing
}  // namespace cctune
