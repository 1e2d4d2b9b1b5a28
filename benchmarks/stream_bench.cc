// STREAM-style bandwidth benchmark: copy, scale, add and triad on three 256 MiB double arrays
// (well beyond the last-level cache), plus a read-only sum, all OpenMP. Its figures are the
// machine's measured bandwidth roofline; gemm_bench reports its GEMVs against them.
//   bazel run -c opt //benchmarks:stream_bench -- --benchmark_min_time=0.5
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "benchmark/benchmark.h"
#include "benchmarks/stream.h"

namespace cctune::bench {
namespace {

constexpr int64_t kN = (256 << 20) / sizeof(double);  // 256 MiB per array

struct Arrays {
  double *a, *b, *c;
  Arrays() {
    a = static_cast<double*>(std::aligned_alloc(4096, kN * sizeof(double)));
    b = static_cast<double*>(std::aligned_alloc(4096, kN * sizeof(double)));
    c = static_cast<double*>(std::aligned_alloc(4096, kN * sizeof(double)));
    FillStreamArray(a, 1.0, kN);
    FillStreamArray(b, 2.0, kN);
    FillStreamArray(c, 0.0, kN);
  }
};

Arrays& GetArrays() {
  static Arrays* arrays = new Arrays();
  return *arrays;
}

template <typename Fn>
void Run(benchmark::State& state, double bytes_per_elem, Fn fn) {
  Arrays& x = GetArrays();
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    fn(x);
    benchmark::ClobberMemory();
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double gbs = bytes_per_elem * kN * state.iterations() / secs * 1e-9;
  state.counters["GB/s"] = gbs;
  state.counters["pct_of_triad"] = 100.0 * gbs / MeasuredStreamPeak().triad_gbs;
  state.SetBytesProcessed(static_cast<int64_t>(bytes_per_elem * kN) * state.iterations());
}

void BM_Copy(benchmark::State& state) {
  Run(state, kCopyBytes, [](Arrays& x) { StreamCopy(x.c, x.a, kN); });
}
void BM_Scale(benchmark::State& state) {
  Run(state, kScaleBytes, [](Arrays& x) { StreamScale(x.b, x.c, 3.0, kN); });
}
void BM_Add(benchmark::State& state) {
  Run(state, kAddBytes, [](Arrays& x) { StreamAdd(x.c, x.a, x.b, kN); });
}
void BM_Triad(benchmark::State& state) {
  Run(state, kTriadBytes, [](Arrays& x) { StreamTriad(x.a, x.b, x.c, 3.0, kN); });
}
void BM_Read(benchmark::State& state) {
  Run(state, kReadBytes, [](Arrays& x) { benchmark::DoNotOptimize(StreamRead(x.a, kN)); });
}

// With --benchmark_repetitions, the `_max` row of a rate counter is the best repetition.
double MaxOf(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

BENCHMARK(BM_Copy)->UseRealTime()->Unit(benchmark::kMillisecond)->ComputeStatistics("max", MaxOf);
BENCHMARK(BM_Scale)->UseRealTime()->Unit(benchmark::kMillisecond)->ComputeStatistics("max", MaxOf);
BENCHMARK(BM_Add)->UseRealTime()->Unit(benchmark::kMillisecond)->ComputeStatistics("max", MaxOf);
BENCHMARK(BM_Triad)->UseRealTime()->Unit(benchmark::kMillisecond)->ComputeStatistics("max", MaxOf);
BENCHMARK(BM_Read)->UseRealTime()->Unit(benchmark::kMillisecond)->ComputeStatistics("max", MaxOf);

}  // namespace
}  // namespace cctune::bench
