#include "tests/util/shared_dir.h"

#include <filesystem>

#include "gtest/gtest.h"

namespace cctune {
namespace testing {
namespace {

TEST(SharedDirTest, FindsWorkspaceRoot) {
  auto root = WorkspaceRoot();
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_TRUE(std::filesystem::exists(*root + "/WORKSPACE")) << *root;
}

TEST(SharedDirTest, FindsStoriesModelOrSaysWhy) {
  auto f = SharedFile("models/stories260K/stories260K.bin");
  if (!f.ok()) GTEST_SKIP() << f.status();
  EXPECT_EQ(std::filesystem::file_size(*f), 1056540u);
  EXPECT_FALSE(SharedFile("no/such/file").ok());
}

}  // namespace
}  // namespace testing
}  // namespace cctune
