// The machine's FP32 FMA peak, from measurements rather than a spec sheet:
//   peak = threads × FMA units × lanes × 2 flops × clock.
// The clock is measured with a chain of dependent scalar FMAs (each waits for the previous
// one: 4 cycles of latency on Intel Skylake..Sapphire Rapids and AMD Zen 2..4), the FMA
// units from the throughput of 12 independent vector chains at the active ISA's width,
// divided by that clock (rounded to a whole number of units). Thread CPU time is used, so
// time the thread spent preempted by other processes does not count.
#ifndef CCTUNE_BENCHMARKS_CPU_PEAK_H_
#define CCTUNE_BENCHMARKS_CPU_PEAK_H_

#include <cstdint>
#include <string>

namespace cctune::bench {

struct FmaPeak {
  double clock_ghz = 0;       // measured (dependent FMAs)
  double cpuinfo_ghz = 0;     // "cpu MHz" of /proc/cpuinfo, 0 if unreadable
  int lanes = 1;              // f32 lanes of the active ISA level's vectors (16, 8, or 1)
  double fma_per_cycle = 0;   // measured vector FMA instructions per cycle, one thread
  int fma_units = 0;          // fma_per_cycle rounded
  int threads = 1;
  double gflops = 0;          // threads × units × lanes × 2 × clock
  std::string Describe() const;  // the formula with its numbers
};

// Register-only loops: 12 independent accumulator chains (in named variables, so nothing
// spills), one instruction per chain per iteration, 12 · iters instructions in all; each
// returns a sum of its accumulators so nothing is optimised away. Call one only where its
// instructions exist: f32 FMA on zmm (AVX-512F), ymm and scalar (FMA), vdpbf16ps on zmm
// (AVX512_BF16; 2 FMAs, 4 flops, per lane).
float FmaChainsZmm(int64_t iters);
float FmaChainsYmm(int64_t iters);
float FmaChainsScalar(int64_t iters);
float DpbfChainsZmm(int64_t iters);
// AMX (call only where cpu::AmxSupported()): four independent 16 x 16 f32 C tiles, each
// += A tile · B tile by tdpbf16ps (16 x 16 x 32 multiply-adds, 16384 flops), iters
// instructions in all (the tiles configured and released inside, on the calling thread).
float AmxTileChains(int64_t iters);

// Measures once per process (about 0.3 s) for `threads` threads at the active ISA level
// (kernels/cpu/isa.h: avx512 -> zmm, avx2 -> ymm, scalar -> scalar FMA).
FmaPeak MeasureFmaPeak(int threads);

}  // namespace cctune::bench

#endif  // CCTUNE_BENCHMARKS_CPU_PEAK_H_
