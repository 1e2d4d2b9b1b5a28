#include "checkpoint/atomic_file.h"

#include <dirent.h>

#include <cstdlib>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp ? tmp : "/tmp", "/atomic_file_test_", name);
  EXPECT_EQ(std::system(absl::StrCat("rm -rf '", dir, "' && mkdir -p '", dir, "'").c_str()), 0);
  return dir;
}

std::set<std::string> List(const std::string& dir) {
  std::set<std::string> names;
  DIR* d = opendir(dir.c_str());
  while (dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..")) names.insert(e->d_name);
  }
  closedir(d);
  return names;
}

TEST(AtomicFileTest, CommitReplacesAndLeavesNoTemporaries) {
  const std::string dir = TestDir("commit");
  const std::string path = dir + "/f.json";
  ASSERT_TRUE(WriteFileAtomically(path, "old").ok());
  auto w = AtomicFileWriter::Create(path);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE((*w)->Append("new ").ok());
  ASSERT_TRUE((*w)->Append(std::string(10000, 'x')).ok());
  // Until Commit() the old contents stay visible.
  EXPECT_EQ(*ReadFileToString(path), "old");
  EXPECT_EQ(List(dir).size(), 2u);
  ASSERT_TRUE((*w)->Commit().ok());
  EXPECT_EQ(*ReadFileToString(path), "new " + std::string(10000, 'x'));
  EXPECT_EQ((*w)->bytes_written(), 10004u);
  EXPECT_EQ(List(dir), std::set<std::string>{"f.json"});
  EXPECT_FALSE((*w)->Commit().ok());  // once only
}

TEST(AtomicFileTest, AbandonedWriteLeavesTheOldFile) {
  const std::string dir = TestDir("abandon");
  const std::string path = dir + "/f";
  ASSERT_TRUE(WriteFileAtomically(path, "keep").ok());
  {
    auto w = AtomicFileWriter::Create(path);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Append("partial").ok());
  }
  EXPECT_EQ(*ReadFileToString(path), "keep");
  EXPECT_EQ(List(dir), std::set<std::string>{"f"});
}

TEST(AtomicFileTest, Errors) {
  auto w = AtomicFileWriter::Create("/no/such/dir/f");
  ASSERT_FALSE(w.ok());
  EXPECT_NE(std::string(w.status().message()).find("/no/such/dir/f"), std::string::npos);
  EXPECT_EQ(ReadFileToString("/no/such/file").status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(ReadFileToString(TestDir("dir")).ok());
}

}  // namespace
}  // namespace cctune
