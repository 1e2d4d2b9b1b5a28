#include "checkpoint/atomic_file.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <sys/resource.h>

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

TEST(AtomicFileTest, RecognisesItsTemporaries) {
  const std::string dir = TestDir("names");
  auto w = AtomicFileWriter::Create(dir + "/model.safetensors");
  ASSERT_TRUE(w.ok()) << w.status();
  const std::string temp = (*w)->temp_path();
  EXPECT_TRUE(IsAtomicWriteTemporary(temp.substr(temp.rfind('/') + 1))) << temp;
  EXPECT_TRUE(IsAtomicWriteTemporary(".LATEST.tmp.4242.0"));
  for (const char* other : {"model.safetensors", "LATEST", ".tmp.1.2", ".LATEST.tmp.12",
                            ".LATEST.tmp.a.1", ".LATEST.tmp.1.", "LATEST.tmp.1.2", "step_3"}) {
    EXPECT_FALSE(IsAtomicWriteTemporary(other)) << other;
  }
}

// A real write error from write(2): past RLIMIT_FSIZE (with SIGXFSZ ignored) it fails with
// EFBIG, the way a full disk fails with ENOSPC. The error names the file and the errno text,
// and the destination keeps its old contents with no temporary left.
TEST(AtomicFileTest, WriteErrorNamesTheFileAndKeepsTheOldOne) {
  const std::string dir = TestDir("efbig");
  const std::string path = dir + "/model.safetensors";
  ASSERT_TRUE(WriteFileAtomically(path, "good").ok());
  struct rlimit old_limit;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  struct sigaction ignore = {}, old_action;
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(sigaction(SIGXFSZ, &ignore, &old_action), 0);
  struct rlimit small = old_limit;
  small.rlim_cur = 4096;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  absl::Status st = WriteFileAtomically(path, std::string(10000, 'x'));
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &old_limit), 0);
  ASSERT_EQ(sigaction(SIGXFSZ, &old_action, nullptr), 0);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(std::string(st.message()).find(path), std::string::npos) << st;
  EXPECT_NE(std::string(st.message()).find(std::strerror(EFBIG)), std::string::npos) << st;
  EXPECT_EQ(*ReadFileToString(path), "good");
  EXPECT_EQ(List(dir), std::set<std::string>{"model.safetensors"});
}

}  // namespace
}  // namespace cctune
