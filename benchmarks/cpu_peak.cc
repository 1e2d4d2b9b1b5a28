#include "benchmarks/cpu_peak.h"

// GCC 12's AVX-512 intrinsic headers trip a false -Wmaybe-uninitialized (GCC PR105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/simd_targets.h"

namespace cctune::bench {
namespace {

constexpr int kChains = 12;
constexpr double kFmaLatencyCycles = 4;

double ThreadSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

__attribute__((target("fma"))) float DependentFma(int64_t iters) {
  __m128 x = _mm_set_ss(1.f);
  const __m128 a = _mm_set_ss(0.999f), b = _mm_set_ss(1e-3f);
  for (int64_t i = 0; i < iters; ++i) {
    x = _mm_fmadd_ss(x, a, b);
    __asm__("" : "+x"(x));
  }
  return _mm_cvtss_f32(x);
}

// 12 independent accumulator chains in named variables (an array would live on the stack,
// each FMA then waiting on a store and a load), one FMA per chain per iteration.
#define CCTUNE_PEAK_CHAINS(V, SET1, FMA, SUM, XV, X, Y)                                 \
  V a0 = SET1(0.f), a1 = SET1(1.f), a2 = SET1(2.f), a3 = SET1(3.f), a4 = SET1(4.f),    \
    a5 = SET1(5.f), a6 = SET1(6.f), a7 = SET1(7.f), a8 = SET1(8.f), a9 = SET1(9.f),    \
    a10 = SET1(10.f), a11 = SET1(11.f);                                                \
  const XV x = X, y = Y;                                                               \
  for (int64_t t = 0; t < iters; ++t) {                                                \
    a0 = FMA(a0, x, y), a1 = FMA(a1, x, y), a2 = FMA(a2, x, y), a3 = FMA(a3, x, y);    \
    a4 = FMA(a4, x, y), a5 = FMA(a5, x, y), a6 = FMA(a6, x, y), a7 = FMA(a7, x, y);    \
    a8 = FMA(a8, x, y), a9 = FMA(a9, x, y), a10 = FMA(a10, x, y), a11 = FMA(a11, x, y); \
  }                                                                                    \
  return SUM(a0) + SUM(a1) + SUM(a2) + SUM(a3) + SUM(a4) + SUM(a5) + SUM(a6) + SUM(a7) + \
         SUM(a8) + SUM(a9) + SUM(a10) + SUM(a11)

__attribute__((target("avx2,fma"))) float First256(__m256 v) {
  return _mm_cvtss_f32(_mm256_castps256_ps128(v));
}
__attribute__((target("fma"))) __m128 Set1Ss(float f) { return _mm_set_ss(f); }

}  // namespace

__attribute__((target("avx512f"))) float FmaChainsZmm(int64_t iters) {
  CCTUNE_PEAK_CHAINS(__m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_reduce_add_ps, __m512,
                     _mm512_set1_ps(0.999f), _mm512_set1_ps(1e-3f));
}

__attribute__((target("avx2,fma"))) float FmaChainsYmm(int64_t iters) {
  CCTUNE_PEAK_CHAINS(__m256, _mm256_set1_ps, _mm256_fmadd_ps, First256, __m256,
                     _mm256_set1_ps(0.999f), _mm256_set1_ps(1e-3f));
}

__attribute__((target("fma"))) float FmaChainsScalar(int64_t iters) {
  CCTUNE_PEAK_CHAINS(__m128, Set1Ss, _mm_fmadd_ss, _mm_cvtss_f32, __m128, Set1Ss(0.999f),
                     Set1Ss(1e-3f));
}

// x = (1, 1), y = (~1e-3, ~1e-3) as bf16 pairs.
__attribute__((target("avx512f,avx512bf16"))) float DpbfChainsZmm(int64_t iters) {
  CCTUNE_PEAK_CHAINS(__m512, _mm512_set1_ps, _mm512_dpbf16_ps, _mm512_reduce_add_ps, __m512bh,
                     (__m512bh)_mm512_set1_epi32(0x3f803f80),
                     (__m512bh)_mm512_set1_epi32(0x3a833a83));
}

CCTUNE_TARGET_AMX float AmxTileChains(int64_t iters) {
  struct alignas(64) {
    uint8_t palette_id, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
  } cfg = {};
  cfg.palette_id = 1;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  _tile_loadconfig(&cfg);
  alignas(64) uint16_t ab[16 * 32];
  for (uint16_t& x : ab) x = 0x3a83;  // bf16 ~0.001: the sums stay finite
  alignas(64) float c[16 * 16];
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, ab, 64);
  _tile_loadd(5, ab, 64);
  _tile_loadd(6, ab, 64);
  _tile_loadd(7, ab, 64);
  for (int64_t i = 0; i < iters / 4; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  float sum = 0;
  _tile_stored(0, c, 64);
  sum += c[0];
  _tile_stored(1, c, 64);
  sum += c[1];
  _tile_stored(2, c, 64);
  sum += c[2];
  _tile_stored(3, c, 64);
  sum += c[3];
  _tile_release();
  return sum;
}

namespace {
#undef CCTUNE_PEAK_CHAINS

// Best (shortest) thread-CPU seconds per iteration of fn over a few repetitions.
double BestSecondsPerIter(float (*fn)(int64_t), int64_t iters) {
  volatile float sink = 0;
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const double t0 = ThreadSeconds();
    sink = sink + fn(iters);
    best = std::min(best, (ThreadSeconds() - t0) / static_cast<double>(iters));
  }
  return best;
}

double CpuinfoGhz() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("cpu MHz", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return std::atof(line.c_str() + colon + 1) / 1e3;
    }
  }
  return 0;
}

}  // namespace

std::string FmaPeak::Describe() const {
  return absl::StrFormat(
      "%d threads x %d FMA units (measured %.2f/cycle) x %d lanes x 2 flops x %.2f GHz "
      "(dependent-FMA clock; /proc/cpuinfo says %.2f) = %.1f GFLOP/s",
      threads, fma_units, fma_per_cycle, lanes, clock_ghz, cpuinfo_ghz, gflops);
}

FmaPeak MeasureFmaPeak(int threads) {
  FmaPeak p;
  p.threads = std::max(threads, 1);
  p.cpuinfo_ghz = CpuinfoGhz();
  const bool fma = cpu::IsaSupported(cpu::IsaLevel::kAvx2);
  if (!fma) {  // scalar level: no FMA assumed; report one lane, one unit at cpuinfo's clock
    p.clock_ghz = p.cpuinfo_ghz;
    p.fma_per_cycle = 1;
    p.fma_units = 1;
    p.gflops = p.threads * 2.0 * p.clock_ghz;
    return p;
  }
  constexpr int64_t kLatencyIters = 20'000'000, kChainIters = 4'000'000;
  p.clock_ghz = kFmaLatencyCycles / BestSecondsPerIter(DependentFma, kLatencyIters) / 1e9;
  float (*chains)(int64_t) = FmaChainsScalar;
  p.lanes = 1;
  if (cpu::IsaSupported(cpu::IsaLevel::kAvx512)) {
    chains = FmaChainsZmm;
    p.lanes = 16;
  } else {
    chains = FmaChainsYmm;
    p.lanes = 8;
  }
  const double secs_per_fma = BestSecondsPerIter(chains, kChainIters) / kChains;
  p.fma_per_cycle = 1.0 / (secs_per_fma * p.clock_ghz * 1e9);
  p.fma_units = std::max(1, static_cast<int>(std::lround(p.fma_per_cycle)));
  p.gflops = p.threads * p.fma_units * p.lanes * 2.0 * p.clock_ghz;
  return p;
}

}  // namespace cctune::bench
