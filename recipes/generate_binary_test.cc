// The generate binary as shipped: its ELF dynamic section names no CUDA library (the CUDA
// backend is libcctune_cuda.so, opened only for device: cuda) nor OpenBLAS (opened at the first
// f32 GEMM, kernels/cpu/blas_shim), and `--help` runs without either.
#include <elf.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/subprocess.h"

namespace cctune {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

// DT_NEEDED entries of a 64-bit little-endian ELF file (what ldd starts from).
std::vector<std::string> NeededLibraries(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> needed;
  if (bytes.size() < sizeof(Elf64_Ehdr) || std::memcmp(bytes.data(), ELFMAG, SELFMAG) != 0 ||
      bytes[EI_CLASS] != ELFCLASS64) {
    ADD_FAILURE() << path << " is not a 64-bit ELF file";
    return needed;
  }
  Elf64_Ehdr eh;
  std::memcpy(&eh, bytes.data(), sizeof(eh));
  std::vector<Elf64_Shdr> sections(eh.e_shnum);
  for (int i = 0; i < eh.e_shnum; ++i) {
    std::memcpy(&sections[i], bytes.data() + eh.e_shoff + i * eh.e_shentsize, sizeof(Elf64_Shdr));
  }
  for (const Elf64_Shdr& sh : sections) {
    if (sh.sh_type != SHT_DYNAMIC) continue;
    const Elf64_Shdr& strtab = sections.at(sh.sh_link);
    for (size_t off = 0; off + sizeof(Elf64_Dyn) <= sh.sh_size; off += sizeof(Elf64_Dyn)) {
      Elf64_Dyn d;
      std::memcpy(&d, bytes.data() + sh.sh_offset + off, sizeof(d));
      if (d.d_tag == DT_NULL) break;
      if (d.d_tag == DT_NEEDED) needed.emplace_back(bytes.data() + strtab.sh_offset + d.d_un.d_val);
    }
  }
  return needed;
}

TEST(GenerateBinaryTest, LinksNoCudaLibrary) {
  const std::string bin = testing::RunfilePath("recipes/generate");
  const std::vector<std::string> needed = NeededLibraries(bin);
  EXPECT_THAT(needed, Contains(HasSubstr("libc.so")));  // the reader works
  for (const std::string& lib : needed) {
    for (const char* cuda : {"libcuda", "libcudart", "libcublas", "libnccl", "libcctune_cuda"}) {
      EXPECT_THAT(lib, ::testing::Not(HasSubstr(cuda))) << bin << " needs " << lib;
    }
    for (const char* lazy : {"libopenblas", "libgfortran"}) {
      EXPECT_THAT(lib, ::testing::Not(HasSubstr(lazy))) << bin << " needs " << lib;
    }
  }
}

TEST(GenerateBinaryTest, HelpRunsWithoutTheCudaLibrary) {
  testing::ProcessResult r = [] {
    ::setenv("CCTUNE_CUDA_LIBRARY", "/nonexistent/libcctune_cuda.so", 1);
    ::setenv("CCTUNE_OPENBLAS_LIBRARY", "/nonexistent/libopenblas.so.0", 1);
    return testing::RunProcess({testing::RunfilePath("recipes/generate"), "--help"});
  }();
  ::unsetenv("CCTUNE_CUDA_LIBRARY");
  ::unsetenv("CCTUNE_OPENBLAS_LIBRARY");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out + r.err, HasSubstr("max_new_tokens"));
}

}  // namespace
}  // namespace cctune
