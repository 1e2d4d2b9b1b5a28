#include "kernels/cpu/isa.h"

#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace cctune::cpu {
namespace {

constexpr const char* kEnv = "CCTUNE_CPU_ISA";

// CPUID and XGETBV spelled out rather than __builtin_cpu_supports: clang 14 (the fuzz build)
// knows neither "f16c" nor "avx512bf16", and the builtin does not check that the OS saves the
// wider registers.
IsaLevel DetectCpu() {
#if defined(__x86_64__)
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return IsaLevel::kScalar;
  const bool fma = ecx & (1u << 12), osxsave = ecx & (1u << 27), avx = ecx & (1u << 28),
             f16c = ecx & (1u << 29);
  if (!osxsave || !avx) return IsaLevel::kScalar;
  unsigned xcr0_lo, xcr0_hi;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  const bool ymm_saved = (xcr0_lo & 0x6u) == 0x6u;           // SSE + AVX state
  const bool zmm_saved = (xcr0_lo & 0xe6u) == 0xe6u;         // + opmask, ZMM0-15 hi, ZMM16-31
  if (!ymm_saved || !fma || !f16c) return IsaLevel::kScalar;
  if (__get_cpuid_max(0, nullptr) < 7) return IsaLevel::kScalar;
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  const unsigned max_subleaf = eax;
  const bool avx2 = ebx & (1u << 5);
  if (!avx2) return IsaLevel::kScalar;
  const bool f = ebx & (1u << 16), dq = ebx & (1u << 17), bw = ebx & (1u << 30),
             vl = ebx & (1u << 31);
  if (!(f && dq && bw && vl && zmm_saved)) return IsaLevel::kAvx2;
  if (max_subleaf < 1) return IsaLevel::kAvx512;
  __cpuid_count(7, 1, eax, ebx, ecx, edx);
  return (eax & (1u << 5)) ? IsaLevel::kAvx512Bf16 : IsaLevel::kAvx512;
#else
  return IsaLevel::kScalar;
#endif
}

// CPUID.7.0:EDX bit 24 AMX-TILE, bit 22 AMX-BF16; the OS must enable XCR0 bits 17 (XTILECFG)
// and 18 (XTILEDATA), and on Linux the process must ask for XTILEDATA before first use.
bool DetectAmx() {
#if defined(__x86_64__) && defined(__linux__)
  if (DetectCpu() != IsaLevel::kAvx512Bf16) return false;
  unsigned eax, ebx, ecx, edx;
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  if (!(edx & (1u << 24)) || !(edx & (1u << 22))) return false;
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
  unsigned xcr0_lo, xcr0_hi;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  return (xcr0_lo & (3u << 17)) == (3u << 17);
#else
  return false;
#endif
}

// CPUID leaf 0's vendor string (EBX, EDX, ECX).
bool DetectAmd() {
#if defined(__x86_64__)
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return false;
  char vendor[13];
  std::memcpy(vendor, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  vendor[12] = '\0';
  return std::string_view(vendor) == "AuthenticAMD";
#else
  return false;
#endif
}

bool EnvAllowsAmx() {
  const char* env = std::getenv(kEnv);
  return env == nullptr || *env == '\0' || std::string_view(env) == "amx";
}

IsaLevel ComputeMax() {
  const IsaLevel cpu = CpuIsaLevel();
  const char* env = std::getenv(kEnv);
  if (env == nullptr || *env == '\0') return cpu;
  const absl::StatusOr<IsaLevel> want = ParseIsaLevel(env);
  // A typo must not fall back to the native paths the caller meant to avoid.
  CCTUNE_CHECK(want.ok(), "CCTUNE_CPU_ISA: ", want.status().message());
  if (static_cast<int>(*want) > static_cast<int>(cpu)) {
    std::fprintf(stderr, "cctune: %s=%s, but this CPU supports up to %s; using %s\n", kEnv, env,
                 IsaLevelName(cpu), IsaLevelName(cpu));
    return cpu;
  }
  return *want;
}

// -1: no scoped level.
std::atomic<int> g_scoped{-1};

}  // namespace

const char* IsaLevelName(IsaLevel level) {
  switch (level) {
    case IsaLevel::kScalar:
      return "scalar";
    case IsaLevel::kAvx2:
      return "avx2";
    case IsaLevel::kAvx512:
      return "avx512";
    case IsaLevel::kAvx512Bf16:
      return "avx512_bf16";
  }
  return "?";
}

absl::StatusOr<IsaLevel> ParseIsaLevel(std::string_view name) {
  if (name == "amx") return IsaLevel::kAvx512Bf16;
  for (IsaLevel l : kAllIsaLevels) {
    if (name == IsaLevelName(l)) return l;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown ISA level \"", std::string(name), "\"; allowed: scalar, avx2, avx512, avx512_bf16, amx"));
}

IsaLevel CpuIsaLevel() {
  static const IsaLevel level = DetectCpu();
  return level;
}

bool CpuHasAmxBf16() {
  static const bool amx = DetectAmx();
  return amx;
}

bool AmxSupported() {
  static const bool allowed = CpuHasAmxBf16() && EnvAllowsAmx();
  return allowed && ActiveIsaLevel() == IsaLevel::kAvx512Bf16;
}

// AMD with AVX512_BF16: Zen 4 and later.
bool CpuHasFullRateBf16Dot() {
  static const bool full = DetectAmd() && DetectCpu() == IsaLevel::kAvx512Bf16;
  return full;
}

bool FullRateBf16DotSupported() {
  return CpuHasFullRateBf16Dot() && ActiveIsaLevel() == IsaLevel::kAvx512Bf16;
}

IsaLevel MaxIsaLevel() {
  static const IsaLevel level = ComputeMax();
  return level;
}

IsaLevel ActiveIsaLevel() {
  const int scoped = g_scoped.load(std::memory_order_relaxed);
  return scoped >= 0 ? static_cast<IsaLevel>(scoped) : MaxIsaLevel();
}

std::vector<IsaLevel> SupportedIsaLevels() {
  std::vector<IsaLevel> out;
  for (IsaLevel l : kAllIsaLevels) {
    if (static_cast<int>(l) <= static_cast<int>(MaxIsaLevel())) out.push_back(l);
  }
  return out;
}

ScopedIsaLevel::ScopedIsaLevel(IsaLevel level) {
  CCTUNE_CHECK(static_cast<int>(level) <= static_cast<int>(MaxIsaLevel()), "ScopedIsaLevel(",
               IsaLevelName(level), "): above this process's level ", IsaLevelName(MaxIsaLevel()),
               " (CPU: ", IsaLevelName(CpuIsaLevel()), ")");
  previous_ = g_scoped.exchange(static_cast<int>(level));
}

ScopedIsaLevel::~ScopedIsaLevel() { g_scoped.store(previous_); }

}  // namespace cctune::cpu
