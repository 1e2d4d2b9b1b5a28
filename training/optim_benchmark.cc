// Fused optimizer step and gradient-norm throughput over one flat parameter buffer:
//   bazel run -c opt //training:optim_benchmark
// Reports achieved memory bandwidth (GB/s): AdamW touches 28 bytes per f32 parameter
// (read p, g, m, v; write p, m, v) and 30 per bf16 parameter (the f32 master plus the bf16
// write-back); GradNorm reads 4 bytes per gradient.
#include <cstdint>

#include "benchmark/benchmark.h"
#include "core/random.h"
#include "core/status.h"
#include "training/optim.h"

namespace cctune {
namespace {

Tensor Filled(int64_t n, DType dtype, Generator& gen) {
  Tensor t = ValueOrDie(Tensor::Empty({n}, DType::kF32));
  float* p = t.data<float>();
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(gen.Uniform() - 0.5f);
  return ValueOrDie(t.To(dtype));
}

void BM_AdamWStep(benchmark::State& state, DType dtype) {
  const int64_t n = state.range(0);
  Generator gen(1);
  Tensor p = Filled(n, dtype, gen), g = Filled(n, DType::kF32, gen);
  auto opt = ValueOrDie(AdamW::Create({{"params", p, g}}, AdamWOptions()));
  for (auto _ : state) {
    CCTUNE_CHECK_OK(opt->Step());
    benchmark::ClobberMemory();
  }
  const double bytes = dtype == DType::kF32 ? 28.0 : 30.0;
  state.counters["GB/s"] =
      benchmark::Counter(bytes * n * state.iterations() / 1e9, benchmark::Counter::kIsRate);
  state.counters["Mparam/s"] =
      benchmark::Counter(n * state.iterations() / 1e6, benchmark::Counter::kIsRate);
}

void BM_SgdMomentumStep(benchmark::State& state) {
  const int64_t n = state.range(0);
  Generator gen(2);
  Tensor p = Filled(n, DType::kF32, gen), g = Filled(n, DType::kF32, gen);
  SgdOptions o;
  o.momentum = 0.9;
  auto opt = ValueOrDie(Sgd::Create({{"params", p, g}}, o));
  for (auto _ : state) {
    CCTUNE_CHECK_OK(opt->Step());
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] =
      benchmark::Counter(20.0 * n * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

void BM_GradNorm(benchmark::State& state) {
  const int64_t n = state.range(0);
  Generator gen(3);
  Tensor g = Filled(n, DType::kF32, gen);
  for (auto _ : state) benchmark::DoNotOptimize(ValueOrDie(GradNorm({g})));
  state.counters["GB/s"] =
      benchmark::Counter(4.0 * n * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

BENCHMARK_CAPTURE(BM_AdamWStep, f32, DType::kF32)->Arg(1 << 20)->Arg(16 << 20)->UseRealTime();
BENCHMARK_CAPTURE(BM_AdamWStep, bf16, DType::kBF16)->Arg(1 << 20)->Arg(16 << 20)->UseRealTime();
BENCHMARK(BM_SgdMomentumStep)->Arg(16 << 20)->UseRealTime();
BENCHMARK(BM_GradNorm)->Arg(16 << 20)->UseRealTime();

}  // namespace
}  // namespace cctune
