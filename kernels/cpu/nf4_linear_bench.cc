// The NF4 linear (QLoRA's frozen base) against the bf16-weight GEMM it replaces, on a Llama
// 3.2 1B projection (2048 -> 8192): forward and dx, decode-like (m = 1) and training-like
// (m = 512) rows; and the dequantization alone at each ISA path. GFLOP/s and weight GB/s
// (bytes of the weight as stored: 0.52 byte per element for NF4, 2 for bf16). Measured on the
// loaded 2-core Xeon (OMP_NUM_THREADS=2, ratios from one run): training rows (m = 512) NF4
// forward 1.17x the bf16 GEMM's time, dx 0.87x the bf16 forward's; decode (m = 1, the
// row-at-a-time path) about 3.3x the bf16 GEMV's (the table lookup and the f32 row written and
// read back, against bf16 widened in registers); dequantization AVX2 / AVX-512 about 2x scalar.
//   bazel run -c opt //kernels/cpu:nf4_linear_bench
#include <vector>

#include "benchmark/benchmark.h"
#include "core/dtype.h"
#include "core/random.h"
#include "core/status.h"
#include "kernels/cpu/gemm/gemm.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/nf4_linear.h"

namespace cctune::cpu {
namespace {

constexpr int64_t kN = 8192, kK = 2048;

std::vector<float> Normal(int64_t n, double std, uint64_t seed) {
  Generator gen(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(gen.Normal() * std);
  return v;
}

const Nf4Quantized& Weight() {
  static const Nf4Quantized* const q = [] {
    const std::vector<float> w = Normal(kN * kK, 0.02, 1);
    return new Nf4Quantized(ValueOrDie(QuantizeNf4(w.data(), kN * kK, "w")));
  }();
  return *q;
}

const std::vector<bf16>& WeightBf16() {
  static const std::vector<bf16>* const w = [] {
    const std::vector<float> f = Normal(kN * kK, 0.02, 1);
    auto* v = new std::vector<bf16>(f.size());
    for (size_t i = 0; i < f.size(); ++i) (*v)[i] = FloatToBf16(f[i]);
    return v;
  }();
  return *w;
}

void Report(benchmark::State& state, int64_t m, double weight_bytes) {
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * m * kN * kK * state.iterations(),
                                                 benchmark::Counter::kIsRate,
                                                 benchmark::Counter::kIs1000);
  state.counters["weight_GB/s"] = benchmark::Counter(weight_bytes * state.iterations(),
                                                     benchmark::Counter::kIsRate,
                                                     benchmark::Counter::kIs1000);
}

void BM_Nf4Forward(benchmark::State& state) {
  const int64_t m = state.range(0);
  const std::vector<float> x = Normal(m * kK, 1.0, 2);
  std::vector<float> y(m * kN);
  const Nf4View w = Weight().view();  // built outside the timing
  for (auto _ : state) {
    Nf4LinearForward(m, kN, kK, x.data(), w, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  Report(state, m, static_cast<double>(Nf4Bytes(kN * kK)));
}
BENCHMARK(BM_Nf4Forward)->Arg(1)->Arg(512)->UseRealTime();

void BM_Bf16Forward(benchmark::State& state) {
  const int64_t m = state.range(0);
  const std::vector<float> x = Normal(m * kK, 1.0, 2);
  std::vector<float> y(m * kN);
  const bf16* w = WeightBf16().data();
  for (auto _ : state) {
    GemmNT(m, kN, kK, x.data(), kK, w, DType::kBF16, kK, y.data(), kN, 0.0f);
    benchmark::DoNotOptimize(y.data());
  }
  Report(state, m, 2.0 * kN * kK);
}
BENCHMARK(BM_Bf16Forward)->Arg(1)->Arg(512)->UseRealTime();

void BM_Nf4BackwardDx(benchmark::State& state) {
  const int64_t m = state.range(0);
  const std::vector<float> dy = Normal(m * kN, 1.0, 3);
  std::vector<float> dx(m * kK, 0.0f);
  const Nf4View w = Weight().view();
  for (auto _ : state) {
    Nf4LinearBackwardDx(m, kN, kK, dy.data(), w, dx.data());
    benchmark::DoNotOptimize(dx.data());
  }
  Report(state, m, static_cast<double>(Nf4Bytes(kN * kK)));
}
BENCHMARK(BM_Nf4BackwardDx)->Arg(512)->UseRealTime();

// Dequantization alone, one thread, at each ISA path: elements per second.
void BM_Nf4Dequantize(benchmark::State& state) {
  const auto isa = static_cast<nf4_internal::Nf4Isa>(state.range(0));
  if ((isa == nf4_internal::Nf4Isa::kAvx512 && !IsaSupported(IsaLevel::kAvx512)) ||
      (isa == nf4_internal::Nf4Isa::kAvx2 && !IsaSupported(IsaLevel::kAvx2))) {
    state.SkipWithError("ISA level not supported here");
    return;
  }
  constexpr int64_t kElems = 1 << 20;
  std::vector<float> out(kElems);
  const Nf4View w = Weight().view();
  for (auto _ : state) {
    nf4_internal::DequantizeNf4RangeWithIsa(isa, w, 0, kElems, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * kElems);
}
BENCHMARK(BM_Nf4Dequantize)->ArgName("isa_scalar0_avx2_1_avx512_2")->Arg(0)->Arg(1)->Arg(2);

}  // namespace
}  // namespace cctune::cpu

BENCHMARK_MAIN();
