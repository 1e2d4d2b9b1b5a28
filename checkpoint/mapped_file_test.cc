#include "checkpoint/mapped_file.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "core/random.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

std::string TempPath(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return absl::StrCat(tmp ? tmp : "/tmp", "/mapped_file_test_", name);
}

TEST(MappedFileTest, MapsContentsPrivately) {
  Generator gen(4);
  std::string bytes(10007, '\0');
  for (char& c : bytes) c = static_cast<char>(gen.NextUint32());
  const std::string path = TempPath("data");
  std::ofstream(path, std::ios::binary).write(bytes.data(), bytes.size());
  auto m = MapFile(path);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ((*m)->bytes(), bytes.size());
  EXPECT_EQ(std::memcmp((*m)->data(), bytes.data(), bytes.size()), 0);
  EXPECT_TRUE((*m)->device().is_cpu());
  EXPECT_FALSE((*m)->owned());
  // Copy-on-write: the file keeps its bytes.
  static_cast<char*>((*m)->data())[0] = static_cast<char>(~bytes[0]);
  auto again = MapFile(path);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(static_cast<const char*>((*again)->data())[0], bytes[0]);
}

// Resident pages of this process's mappings (the second field of /proc/self/statm).
int64_t ResidentPages() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident;
}

TEST(MappedFileTest, ReleasePagesDropsResidencyAndKeepsTheData) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t n = 2048 * page;  // 8 MiB with 4 KiB pages
  Generator gen(5);
  std::string bytes(n, '\0');
  for (char& c : bytes) c = static_cast<char>(gen.NextUint32());
  const std::string path = TempPath("release");
  std::ofstream(path, std::ios::binary).write(bytes.data(), bytes.size());
  auto m = MapFile(path);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_TRUE((*m)->file_mapped());
  const int64_t before = ResidentPages();
  EXPECT_EQ(std::memcmp((*m)->data(), bytes.data(), n), 0);  // faults every page in
  const int64_t touched = ResidentPages();
  EXPECT_GE(touched - before, static_cast<int64_t>(n / page) * 9 / 10);
  // A range that starts and ends inside pages releases only the whole pages within it.
  (*m)->ReleasePages(page / 2, n - page);
  const int64_t released = ResidentPages();
  EXPECT_LE(released, touched - static_cast<int64_t>(n / page) * 9 / 10);
  // Still readable: the pages come back from the file.
  EXPECT_EQ(std::memcmp((*m)->data(), bytes.data(), n), 0);
  // Other storage is never released (it would lose data): a no-op.
  auto owned = Storage::Allocate(Device::Cpu(), n);
  ASSERT_TRUE(owned.ok());
  EXPECT_FALSE((*owned)->file_mapped());
  std::memcpy((*owned)->data(), bytes.data(), n);
  (*owned)->ReleasePages(0, n);
  EXPECT_EQ(std::memcmp((*owned)->data(), bytes.data(), n), 0);
}

TEST(MappedFileTest, EmptyAndMissing) {
  const std::string path = TempPath("empty");
  std::ofstream(path, std::ios::binary).close();
  auto m = MapFile(path);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->bytes(), 0u);
  auto missing = MapFile(TempPath("missing"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(std::string(missing.status().message()).find("mapped_file_test_missing"),
            std::string::npos);
  const char* tmp = std::getenv("TEST_TMPDIR");
  EXPECT_EQ(MapFile(tmp ? tmp : "/tmp").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cctune
