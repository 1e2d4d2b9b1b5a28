#include "checkpoint/mapped_file.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <iterator>
#include <string>

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

// Minor page faults of this process so far.
int64_t MinorFaults() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}

TEST(MappedFileTest, PopulatePagesMapsThePagesWithoutCopying) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t n = 2048 * page;
  Generator gen(6);
  std::string bytes(n, '\0');
  for (char& c : bytes) c = static_cast<char>(gen.NextUint32());
  const std::string path = TempPath("populate");
  std::ofstream(path, std::ios::binary).write(bytes.data(), bytes.size());
  auto m = MapFile(path);
  ASSERT_TRUE(m.ok()) << m.status();
  const int64_t before = ResidentPages();
  // A range that starts and ends inside pages covers the pages it touches.
  if (!(*m)->PopulatePages(page / 2, n - page)) GTEST_SKIP() << "no MADV_POPULATE_READ here";
  EXPECT_GE(ResidentPages() - before, static_cast<int64_t>(n / page) * 9 / 10);
  // Reading it all now takes (almost) no page faults, and the bytes are the file's.
  // Under AddressSanitizer the compare also faults in the mapping's shadow memory, one byte
  // per 8: n/8 bytes of fresh shadow pages (without the populate it would be n/page faults).
#if defined(__SANITIZE_ADDRESS__)
  const int64_t shadow_pages = static_cast<int64_t>(n / 8 / page);
#else
  const int64_t shadow_pages = 0;
#endif
  const int64_t faults = MinorFaults();
  EXPECT_EQ(std::memcmp((*m)->data(), bytes.data(), n), 0);
  EXPECT_LT(MinorFaults() - faults, static_cast<int64_t>(n / page) / 16 + shadow_pages);
  // Not copy-on-write copies: releasing them drops them, and the file's bytes come back.
  (*m)->ReleasePages(0, n);
  EXPECT_LE(ResidentPages(), before + static_cast<int64_t>(n / page) / 10);
  EXPECT_EQ(std::memcmp((*m)->data(), bytes.data(), n), 0);
  // Owned storage is not a mapping: refused, nothing changes.
  auto owned = Storage::Allocate(Device::Cpu(), n);
  ASSERT_TRUE(owned.ok());
  EXPECT_FALSE((*owned)->PopulatePages(0, n));
  EXPECT_FALSE((*m)->PopulatePages(n, 1));  // past the end
}

// The VmFlags of the /proc/self/smaps mapping that holds `p`.
std::string VmFlagsOf(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > 12) {
      inside = a >= lo && a < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

TEST(MappedFileTest, AdviseHugePagesMarksOwnedBlocksOnly) {
  const size_t n = size_t{8} << 20;
  auto owned = Storage::Allocate(Device::Cpu(), n);
  ASSERT_TRUE(owned.ok());
  const bool advised = (*owned)->AdviseHugePages();
  std::memset((*owned)->data(), 7, n);  // still ordinary, writable memory
  EXPECT_EQ(static_cast<const char*>((*owned)->data())[n - 1], 7);
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode((std::istreambuf_iterator<char>(thp)), std::istreambuf_iterator<char>());
  if (mode.find("[never]") == std::string::npos && !mode.empty()) {
    EXPECT_TRUE(advised);
    // "hg": the VMA of the block's 2 MiB-aligned interior carries MADV_HUGEPAGE.
    const uintptr_t mid = (reinterpret_cast<uintptr_t>((*owned)->data()) + (size_t{4} << 20)) &
                          ~((uintptr_t{2} << 20) - 1);
    EXPECT_NE(VmFlagsOf(reinterpret_cast<void*>(mid)).find(" hg"), std::string::npos)
        << VmFlagsOf(reinterpret_cast<void*>(mid));
  }
  // A small block holds no whole 2 MiB page; a mapping is not owned.
  auto small = Storage::Allocate(Device::Cpu(), 4096);
  ASSERT_TRUE(small.ok());
  EXPECT_FALSE((*small)->AdviseHugePages());
  const std::string path = TempPath("advise");
  std::ofstream(path, std::ios::binary).write(std::string(n, 'x').data(), n);
  auto m = MapFile(path);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_FALSE((*m)->AdviseHugePages());
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
