// The one place that decides which instruction-set level the CPU kernels may use.
//
// Every run-time dispatch (GEMM tiles, f16 conversion, ...) asks IsaSupported() instead of
// querying the CPU itself, so a level can be forced for a whole process:
//
//   CCTUNE_CPU_ISA=scalar|avx2|avx512|avx512_bf16|amx
//
// A level above what the CPU has is clamped down to the CPU's (one warning on stderr naming
// both); an unknown value aborts at first use with a message listing the allowed values, so a
// typo never silently runs the native paths. Running the suite with CCTUNE_CPU_ISA=avx2 on an
// AVX-512 machine takes the paths an AVX2-only machine (Zen 3) takes; see the avx2/scalar
// configs in .bazelrc, which also lower -march and OpenBLAS's core type.
//
// AMX (AMX-TILE + AMX-BF16 tile matrix multiply, Sapphire Rapids) is a capability above
// avx512_bf16 rather than an IsaLevel (the level list is what tests iterate kernels over; AMX
// is one GEMM, amx_gemm.h): AmxSupported() is true when the CPU has it, the OS granted the
// tile data state, CCTUNE_CPU_ISA is unset or "amx" (which otherwise means avx512_bf16), and
// the active level is avx512_bf16 (a ScopedIsaLevel below it turns AMX off with the rest).
//
// Code compiled for the build's -march (auto-vectorised loops, `#if __F16C__`) is not
// affected: that is the build configuration's business, not the run time's.
#ifndef CCTUNE_KERNELS_CPU_ISA_H_
#define CCTUNE_KERNELS_CPU_ISA_H_

#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace cctune::cpu {

// Ordered: each level includes the ones below it.
enum class IsaLevel {
  kScalar = 0,      // portable C++ only
  kAvx2 = 1,        // AVX2 + FMA + F16C (x86-64-v3; Haswell, Zen 1-3)
  kAvx512 = 2,      // + AVX-512 F/BW/VL/DQ (Skylake-X, Zen 4)
  kAvx512Bf16 = 3,  // + AVX512_BF16 (Cooper Lake, Sapphire Rapids, Zen 4)
};

inline constexpr IsaLevel kAllIsaLevels[] = {IsaLevel::kScalar, IsaLevel::kAvx2,
                                             IsaLevel::kAvx512, IsaLevel::kAvx512Bf16};

// "scalar", "avx2", "avx512", "avx512_bf16" (the CCTUNE_CPU_ISA spellings).
const char* IsaLevelName(IsaLevel level);
// The inverse of IsaLevelName; InvalidArgument listing the allowed values otherwise.
absl::StatusOr<IsaLevel> ParseIsaLevel(std::string_view name);

// "amx" parses as kAvx512Bf16 (plus AMX, see AmxSupported()).
// What the CPU (and OS: saved YMM/ZMM state) supports, from CPUID; ignores the environment.
IsaLevel CpuIsaLevel();
// The process's ceiling: CpuIsaLevel() lowered by CCTUNE_CPU_ISA. Read once. Aborts with a
// message on an unknown CCTUNE_CPU_ISA value.
IsaLevel MaxIsaLevel();
// The level dispatch uses now: MaxIsaLevel(), or a ScopedIsaLevel's while one is alive.
IsaLevel ActiveIsaLevel();
// Whether code of `level` may run now (level <= ActiveIsaLevel()).
inline bool IsaSupported(IsaLevel level) {
  return static_cast<int>(level) <= static_cast<int>(ActiveIsaLevel());
}
// The levels <= MaxIsaLevel(), lowest first.
std::vector<IsaLevel> SupportedIsaLevels();

// AMX-TILE + AMX-BF16 on this CPU, XCR0 tile state enabled, and the process granted
// XTILEDATA (arch_prctl(ARCH_REQ_XCOMP_PERM), requested on the first call, thread-safe).
// Ignores the environment.
bool CpuHasAmxBf16();
// Whether AMX code may run now: CpuHasAmxBf16(), CCTUNE_CPU_ISA unset/empty or "amx", and
// ActiveIsaLevel() == kAvx512Bf16.
bool AmxSupported();

// Whether this CPU's vdpbf16ps (zmm) issues at the rate of its f32 FMA (zmm), so that the bf16
// dot product does twice the flops per cycle (4 per lane against 2): AMD Zen 4 and Zen 5 with
// AVX512_BF16 (measured on a Zen 5 EPYC: both 2 per cycle per core). Intel Cooper Lake and
// Sapphire Rapids issue it at half the FMA's rate (benchmarks/README.md), so there it is no
// faster than f32 FMA. From CPUID (vendor and AVX512_BF16); ignores the environment.
bool CpuHasFullRateBf16Dot();
// CpuHasFullRateBf16Dot() and the active level is kAvx512Bf16 (CCTUNE_CPU_ISA=avx512 or a
// ScopedIsaLevel below it turns it off).
bool FullRateBf16DotSupported();

// Lowers the active level for its lifetime (tests: run one kernel at each level). `level`
// must be <= MaxIsaLevel() (CHECK). Process-wide, not per thread: create it outside parallel
// regions, and do not let two overlap on different threads. Nesting restores in LIFO order.
class ScopedIsaLevel {
 public:
  explicit ScopedIsaLevel(IsaLevel level);
  ~ScopedIsaLevel();
  ScopedIsaLevel(const ScopedIsaLevel&) = delete;
  ScopedIsaLevel& operator=(const ScopedIsaLevel&) = delete;

 private:
  int previous_;
};

}  // namespace cctune::cpu

#endif  // CCTUNE_KERNELS_CPU_ISA_H_
