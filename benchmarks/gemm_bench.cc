// GEMM / GEMV throughput of //kernels/cpu/gemm against the machine's measured STREAM peak.
//   bazel run -c opt //benchmarks:gemm_bench -- --benchmark_min_time=0.2
// GEMM: square f32 (SgemmStrided) and f32-activation x {f32, bf16}-weight (GemmNT) -> GFLOP/s.
// GEMV (m = 1, the decode step) on Llama-3.2-1B shapes -> GB/s of weights read, GFLOP/s and
// that bandwidth as a percentage of STREAM triad and of a read-only sweep. Weights rotate over
// enough copies to span >= 256 MiB, so every call streams them from DRAM, as in real decode.
// SmallM: m = 1..512 rows against 2048x2048 weights, streaming kernel vs OpenBLAS route vs
// packed GEMM (f32 FMA and bf16 dot) (the data behind GemmNT's kMaxStreamRows thresholds).
// Peak: register-only loops of f32 FMA (zmm, ymm) and vdpbf16ps on every OpenMP thread: the
// machine's measured compute peak, printed before the table and as pct_of_peak on Prefill.
// Prefill: m = 128 and 512 rows against the 1.1B model's weight shapes (bf16), each path of
// GemmNT in the same run (streaming kernel, OpenBLAS route, packed GEMM f32 / bf16 dot).
// GCC 12's AVX-512 intrinsic headers trip a false -Wuninitialized (GCC PR105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <cblas.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "benchmarks/cpu_peak.h"
#include "benchmarks/stream.h"
#include "core/dtype.h"
#include "kernels/cpu/gemm/gemm.h"
#include "kernels/cpu/isa.h"

namespace cctune::bench {
namespace {

using cpu::gemm_internal::GemmIsa;
using cpu::gemm_internal::GemmIsaName;
using cpu::gemm_internal::GemmIsaSupported;

constexpr int64_t kColdBytes = int64_t{256} << 20;

// A buffer of `count` elements of `dtype` with deterministic values in [-1, 1).
class Buffer {
 public:
  Buffer(int64_t count, DType dtype) : bytes_(count * DTypeSize(dtype)) {
    data_ = static_cast<uint8_t*>(std::aligned_alloc(64, (bytes_ + 63) / 64 * 64));
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < count; ++i) {
      uint64_t h = static_cast<uint64_t>(i + 1) * 0x9E3779B97F4A7C15ull;
      h ^= h >> 29;
      const float v = static_cast<float>(h & 0xffff) / 32768.f - 1.f;
      switch (dtype) {
        case DType::kBF16:
          reinterpret_cast<bf16*>(data_)[i] = FloatToBf16(v);
          break;
        case DType::kF16:
          reinterpret_cast<f16*>(data_)[i] = FloatToF16(v);
          break;
        default:
          reinterpret_cast<float*>(data_)[i] = v;
      }
    }
  }
  ~Buffer() { std::free(data_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* data() const { return data_; }
  float* f32() const { return reinterpret_cast<float*>(data_); }

 private:
  int64_t bytes_;
  uint8_t* data_;
};

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// CPU seconds used by the whole process (all threads).
double ProcessCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

void SetCounters(benchmark::State& state, double secs, double flops, double weight_bytes) {
  const double iters = static_cast<double>(state.iterations());
  state.counters["GFLOP/s"] = flops * iters / secs * 1e-9;
  if (weight_bytes > 0) {
    const double gbs = weight_bytes * iters / secs * 1e-9;
    const StreamPeak& peak = MeasuredStreamPeak();
    state.counters["GB/s"] = gbs;
    state.counters["pct_of_stream"] = 100.0 * gbs / peak.triad_gbs;
    state.counters["pct_of_read"] = 100.0 * gbs / peak.read_gbs;
  }
}

// SgemmStrided, square f32.
void BM_Sgemm(benchmark::State& state) {
  const int64_t s = state.range(0);
  Buffer a(s * s, DType::kF32), b(s * s, DType::kF32), c(s * s, DType::kF32);
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    cpu::SgemmStrided(false, false, s, s, s, a.f32(), s, b.f32(), s, c.f32(), s, 0.f);
    benchmark::ClobberMemory();
  }
  SetCounters(state, Seconds(t0), 2.0 * s * s * s, 0);
}

// GemmNT with weights of `dtype` (m rows of activations), on `isa`. `cold`: rotate over copies
// of the weights spanning >= 256 MiB so they come from DRAM.
void BM_GemmNT(benchmark::State& state, DType dtype, GemmIsa isa, int64_t m, int64_t n, int64_t k,
               bool cold) {
  if (!GemmIsaSupported(isa)) {
    state.SkipWithError("path not supported on this CPU");
    return;
  }
  const int64_t weight_bytes = n * k * static_cast<int64_t>(DTypeSize(dtype));
  const int64_t copies =
      cold ? std::max<int64_t>(1, (kColdBytes + weight_bytes - 1) / weight_bytes) : 1;
  Buffer w(copies * n * k, dtype), a(m * k, DType::kF32), c(m * n, DType::kF32);
  const size_t elem = DTypeSize(dtype);
  int64_t copy = 0;
  const double cpu0 = ProcessCpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    const void* b = static_cast<const uint8_t*>(w.data()) + copy * n * k * elem;
    cpu::gemm_internal::GemmNTWithIsa(isa, m, n, k, a.f32(), k, b, dtype, k, c.f32(), n, 0.f);
    benchmark::ClobberMemory();
    if (++copy == copies) copy = 0;
  }
  const double secs = Seconds(t0);
  // GFLOP/s_cpu divides by the process's CPU seconds per thread instead of wall time: on a
  // shared machine where this process gets only part of the cores, the rate while it ran.
  const double cpu_per_thread = (ProcessCpuSeconds() - cpu0) / omp_get_max_threads();
  SetCounters(state, secs, 2.0 * m * n * k, m <= 16 ? static_cast<double>(weight_bytes) : 0);
  state.counters["GFLOP/s_cpu"] =
      2.0 * m * n * k * static_cast<double>(state.iterations()) / cpu_per_thread * 1e-9;
}

// SgemmStrided on one route at a training shape (trans flags as SgemmStrided's).
void BM_TrainGemm(benchmark::State& state, cpu::gemm_internal::SgemmPath path, bool trans_a,
                  bool trans_b, int64_t m, int64_t n, int64_t k) {
  Buffer a(m * k, DType::kF32), b(n * k, DType::kF32), c(m * n, DType::kF32);
  const int64_t lda = trans_a ? m : k, ldb = trans_b ? k : n;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    cpu::gemm_internal::SgemmStridedWithPath(path, trans_a, trans_b, m, n, k, a.f32(), lda, b.f32(),
                                             ldb, c.f32(), n, 0.f);
    benchmark::ClobberMemory();
  }
  SetCounters(state, Seconds(t0), 2.0 * m * n * k, 0);
}

// OpenBLAS's own GEMV on f32 weights, rows split over OpenMP threads (this library keeps
// OpenBLAS single-threaded), as a baseline for the m = 1 rows.
void BM_CblasSgemv(benchmark::State& state, int64_t n, int64_t k) {
  const int64_t weight_bytes = n * k * 4;
  const int64_t copies = std::max<int64_t>(1, (kColdBytes + weight_bytes - 1) / weight_bytes);
  Buffer w(copies * n * k, DType::kF32), a(k, DType::kF32), c(n, DType::kF32);
  openblas_set_num_threads(1);  // as //kernels/cpu/gemm does
  int64_t copy = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    const float* b = w.f32() + copy * n * k;
#pragma omp parallel
    {
      const int nt = omp_get_num_threads(), tid = omp_get_thread_num();
      const int64_t j0 = n * tid / nt, j1 = n * (tid + 1) / nt;
      cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(j1 - j0), static_cast<int>(k), 1.f,
                  b + j0 * k, static_cast<int>(k), a.f32(), 1, 0.f, c.f32() + j0, 1);
    }
    benchmark::ClobberMemory();
    if (++copy == copies) copy = 0;
  }
  SetCounters(state, Seconds(t0), 2.0 * n * k, static_cast<double>(weight_bytes));
}

// ---- Compute peak: independent accumulator chains in registers, no memory traffic. ----

constexpr int kPeakChains = 12;  // benchmarks/cpu_peak.h's chains: > latency x issue width
constexpr int64_t kPeakIters = 20'000'000;

double MeasurePeak(float (*fn)(int64_t), double flops_per_iter) {
  volatile float sink = 0;
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    double rate = 0;
#pragma omp parallel reduction(+ : rate)
    {
      timespec t0, t1;
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
      const float s = fn(kPeakIters);
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
      const double secs = static_cast<double>(t1.tv_sec - t0.tv_sec) +
                          1e-9 * static_cast<double>(t1.tv_nsec - t0.tv_nsec);
      rate += kPeakIters * flops_per_iter / secs * 1e-9;
#pragma omp critical
      sink = sink + s;
    }
    best = std::max(best, rate);
  }
  return best;
}

struct ComputePeak {
  double fma512 = 0, fma256 = 0, dpbf16 = 0, amx = 0;  // GFLOP/s, all threads
};

const ComputePeak& MeasuredComputePeak() {
  static const ComputePeak peak = [] {
    ComputePeak p;
    if (cpu::IsaSupported(cpu::IsaLevel::kAvx2)) p.fma256 = MeasurePeak(bench::FmaChainsYmm, 12 * 8 * 2);
    if (cpu::IsaSupported(cpu::IsaLevel::kAvx512)) p.fma512 = MeasurePeak(bench::FmaChainsZmm, 12 * 16 * 2);
    if (cpu::IsaSupported(cpu::IsaLevel::kAvx512Bf16)) {
      p.dpbf16 = MeasurePeak(bench::DpbfChainsZmm, 12 * 16 * 4);
    }
    if (cpu::AmxSupported()) p.amx = MeasurePeak(bench::AmxTileChains, 16 * 16 * 32 * 2);
    std::printf(
        "measured compute peak (%d threads, GFLOP/s): f32 FMA zmm %.1f, f32 FMA ymm %.1f, "
        "vdpbf16ps %.1f, AMX tdpbf16ps %.1f\n",
        omp_get_max_threads(), p.fma512, p.fma256, p.dpbf16, p.amx);
    return p;
  }();
  return peak;
}

void BM_Peak(benchmark::State& state, int which) {
  const ComputePeak& p = MeasuredComputePeak();
  for (auto _ : state) benchmark::DoNotOptimize(p.fma512);
  state.counters["GFLOP/s"] = which == 0   ? p.fma512
                              : which == 1 ? p.fma256
                              : which == 2 ? p.dpbf16
                                           : p.amx;
}

// The peak a path is measured against: its own instruction's (vdpbf16ps for the bf16 dot
// paths, f32 FMA at the active vector width otherwise). kAuto is measured against the route it
// takes for bf16 weights at m rows (gemm_internal::AutoBf16Route), not always f32 FMA's peak.
double PeakFor(GemmIsa isa, int64_t m) {
  const ComputePeak& p = MeasuredComputePeak();
  if (isa == GemmIsa::kAuto) {
    const GemmIsa route = cpu::gemm_internal::AutoBf16Route(m);
    if (route != GemmIsa::kAuto) isa = route;
  }
  if (isa == GemmIsa::kPackedBf16 || isa == GemmIsa::kAvx512Bf16) return p.dpbf16;
  if (isa == GemmIsa::kAmx) return p.amx;
  return cpu::IsaSupported(cpu::IsaLevel::kAvx512) ? p.fma512 : p.fma256;
}

// GemmNT at a prefill shape. One copy of the weights (not rotated as for Gemv), so they may
// stay in a large last-level cache between calls, which a real prefill's layers do not.
void BM_Prefill(benchmark::State& state, GemmIsa isa, int64_t m, int64_t n, int64_t k) {
  const double peak = PeakFor(isa, m);
  BM_GemmNT(state, DType::kBF16, isa, m, n, k, false);
  if (peak > 0 && state.counters.count("GFLOP/s")) {
    state.counters["peak"] = peak;
    state.counters["pct_of_peak"] = 100.0 * state.counters["GFLOP/s"] / peak;
    state.counters["pct_of_peak_cpu"] = 100.0 * state.counters["GFLOP/s_cpu"] / peak;
  }
}

// The three GEMMs of a Linear with bf16 weights W [out, in] in a training step, as TrainStep
// runs them (batch-invariant routing): forward x·Wᵀ (GemmNT), dX = dY·W (GemmNNBf16) and
// dW = dYᵀ·X (GemmTNBf16). `which`: 0, 1, 2. Skips where the bf16 dot routes do not run.
void BM_TrainGemmBf16(benchmark::State& state, int which, int64_t tokens, int64_t out,
                      int64_t in) {
  if (!cpu::gemm_internal::Bf16DotRouteEnabled()) {
    state.SkipWithError("the bf16 dot routes are off on this CPU (cpu::CpuHasFullRateBf16Dot)");
    return;
  }
  cpu::ScopedBatchInvariantGemm invariant;
  Buffer x(tokens * in, DType::kF32), w(out * in, DType::kBF16), dy(tokens * out, DType::kF32),
      c(std::max(tokens * std::max(in, out), out * in), DType::kF32);
  const int64_t m = which == 2 ? out : tokens, n = which == 0 ? out : in,
                k = which == 2 ? tokens : which == 0 ? in : out;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    bool ran = true;
    if (which == 0) {
      cpu::GemmNT(tokens, out, in, x.f32(), in, w.data(), DType::kBF16, in, c.f32(), out, 0.f);
    } else if (which == 1) {
      ran = cpu::GemmNNBf16(tokens, in, out, dy.f32(), out, w.data(), in, c.f32(), in, 0.f);
    } else {
      ran = cpu::GemmTNBf16(out, in, tokens, dy.f32(), out, x.f32(), in, c.f32(), in, 0.f);
    }
    if (!ran) {
      state.SkipWithError("the bf16 route declined this shape");
      return;
    }
    benchmark::ClobberMemory();
  }
  SetCounters(state, Seconds(t0), 2.0 * m * n * k, 0);
  const double peak = MeasuredComputePeak().dpbf16;
  if (peak > 0) state.counters["pct_of_peak"] = 100.0 * state.counters["GFLOP/s"] / peak;
}

// With --benchmark_repetitions, the `_max` row of a rate counter is the best repetition.
double MaxOf(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

const bool kRegistered = [] {
  // Square GEMM.
  for (int64_t s : {512, 1024, 2048}) {
    benchmark::RegisterBenchmark(absl::StrCat("Gemm/SgemmStrided_f32/", s).c_str(), BM_Sgemm)
        ->Arg(s)
        ->ComputeStatistics("max", MaxOf);
    for (DType t : {DType::kF32, DType::kBF16}) {
      benchmark::RegisterBenchmark(absl::StrCat("Gemm/GemmNT_", DTypeName(t), "/", s).c_str(),
                                   BM_GemmNT, t, GemmIsa::kAuto, s, s, s, false)
          ->ComputeStatistics("max", MaxOf);
    }
  }
  // Decode GEMV on Llama-3.2-1B shapes: [n, k] weights.
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {2048, 2048}, {8192, 2048}, {2048, 8192}, {128256, 2048}};
  for (auto [n, k] : shapes) {
    const std::string shape = absl::StrCat(n, "x", k);
    for (auto [t, isa] :
         std::vector<std::pair<DType, GemmIsa>>{{DType::kBF16, GemmIsa::kAuto},
                                                {DType::kBF16, GemmIsa::kAvx2},
                                                {DType::kBF16, GemmIsa::kAvx512Bf16},
                                                {DType::kF16, GemmIsa::kAuto},
                                                {DType::kF32, GemmIsa::kAuto},
                                                {DType::kF32, GemmIsa::kBlas}}) {
      benchmark::RegisterBenchmark(
          absl::StrCat("Gemv/", DTypeName(t), "_", GemmIsaName(isa), "/", shape).c_str(), BM_GemmNT,
          t, isa, 1, n, k, true)
          ->ComputeStatistics("max", MaxOf);
    }
    benchmark::RegisterBenchmark(absl::StrCat("Gemv/f32_cblas_sgemv/", shape).c_str(),
                                 BM_CblasSgemv, n, k)
        ->ComputeStatistics("max", MaxOf);
  }
  // Small m: streaming kernel vs OpenBLAS route vs packed GEMM, 2048x2048 weights from DRAM
  // (the crossover behind kMaxStreamRows*).
  for (DType t : {DType::kBF16, DType::kF32}) {
    for (GemmIsa isa : {GemmIsa::kAvx512, GemmIsa::kAvx2, GemmIsa::kBlas, GemmIsa::kPacked,
                        GemmIsa::kAvx512Bf16, GemmIsa::kPackedBf16, GemmIsa::kAmx}) {
      if ((isa == GemmIsa::kAmx || isa == GemmIsa::kPackedBf16 || isa == GemmIsa::kAvx512Bf16) &&
          t != DType::kBF16) {
        continue;
      }
      for (int64_t m : {1, 2, 4, 8, 16, 32, 64, 128, 256, 512}) {
        benchmark::RegisterBenchmark(
            absl::StrCat("SmallM/", DTypeName(t), "_", GemmIsaName(isa), "/m:", m).c_str(),
            BM_GemmNT, t, isa, m, 2048, 2048, true)
            ->ComputeStatistics("max", MaxOf);
      }
    }
  }
  // Training GEMMs of train_bench's 15.7M model (1024 tokens; d 384, kv 128, ffn 1024, vocab
  // 8192 in chunks) and of the 1.1B model's prefill-sized steps (512 tokens; d 2048, ffn 8192):
  // forward x·Wᵀ (NT), dX = dY·W (NN), dW = dYᵀ·X (TN), OpenBLAS vs the packed GEMM.
  struct TrainShape {
    int64_t tokens, out, in;
  };
  const std::vector<TrainShape> train = {{1024, 384, 384}, {1024, 128, 384}, {1024, 1024, 384},
                                         {1024, 384, 1024}, {1024, 8192, 384}, {512, 2048, 2048},
                                         {512, 8192, 2048}, {512, 2048, 8192}};
  using cpu::gemm_internal::SgemmPath;
  for (const TrainShape& t : train) {
    for (SgemmPath path : {SgemmPath::kBlas, SgemmPath::kPacked, SgemmPath::kAuto}) {
      const std::string tag = absl::StrCat(cpu::gemm_internal::SgemmPathName(path), "/t:", t.tokens,
                                           "/out:", t.out, "/in:", t.in);
      benchmark::RegisterBenchmark(absl::StrCat("Train/fwd_nt_", tag).c_str(), BM_TrainGemm, path,
                                   false, true, t.tokens, t.out, t.in)
          ->ComputeStatistics("max", MaxOf);
      benchmark::RegisterBenchmark(absl::StrCat("Train/dx_nn_", tag).c_str(), BM_TrainGemm, path,
                                   false, false, t.tokens, t.in, t.out)
          ->ComputeStatistics("max", MaxOf);
      benchmark::RegisterBenchmark(absl::StrCat("Train/dw_tn_", tag).c_str(), BM_TrainGemm, path,
                                   true, false, t.out, t.in, t.tokens)
          ->ComputeStatistics("max", MaxOf);
    }
  }
  // The same 15.7M shapes with bf16 weights on the bf16 dot routes (Zen 4/5).
  for (const TrainShape& t : train) {
    if (t.tokens != 1024) continue;
    const std::string tag = absl::StrCat("t:", t.tokens, "/out:", t.out, "/in:", t.in);
    const char* names[] = {"fwd_nt", "dx_nn", "dw_tn"};
    for (int which = 0; which < 3; ++which) {
      benchmark::RegisterBenchmark(absl::StrCat("TrainBf16/", names[which], "/", tag).c_str(),
                                   BM_TrainGemmBf16, which, t.tokens, t.out, t.in)
          ->ComputeStatistics("max", MaxOf);
    }
  }
  // Compute peak (register-only loops).
  benchmark::RegisterBenchmark("Peak/f32_fma_zmm", BM_Peak, 0)->Iterations(1);
  benchmark::RegisterBenchmark("Peak/f32_fma_ymm", BM_Peak, 1)->Iterations(1);
  benchmark::RegisterBenchmark("Peak/vdpbf16ps", BM_Peak, 2)->Iterations(1);
  benchmark::RegisterBenchmark("Peak/amx_tdpbf16ps", BM_Peak, 3)->Iterations(1);
  // Prefill of the 1.1B model (dim 2048, 32/8 heads, ffn 8192, vocab 32000): q/o, k/v,
  // gate/up, down, LM head; bf16 weights.
  const std::vector<std::pair<int64_t, int64_t>> prefill = {
      {2048, 2048}, {512, 2048}, {8192, 2048}, {2048, 8192}, {32000, 2048}};
  for (int64_t m : {128, 512}) {
    for (auto [n, k] : prefill) {
      for (GemmIsa isa : {GemmIsa::kAuto, GemmIsa::kAvx512, GemmIsa::kAvx2, GemmIsa::kBlas,
                          GemmIsa::kPacked, GemmIsa::kPackedBf16, GemmIsa::kAmx}) {
        benchmark::RegisterBenchmark(
            absl::StrCat("Prefill/bf16_", GemmIsaName(isa), "/m:", m, "/", n, "x", k).c_str(),
            BM_Prefill, isa, m, n, k)
            ->ComputeStatistics("max", MaxOf);
      }
    }
  }
  return true;
}();

}  // namespace
}  // namespace cctune::bench
