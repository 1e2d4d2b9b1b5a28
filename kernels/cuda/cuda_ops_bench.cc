// CUDA op benchmarks (bazel run -c opt //kernels/cuda:cuda_ops_bench) on cuda:0, reporting
// bytes/s for the memory-bound ops and FLOP/s for the matrix products. Each iteration enqueues
// kReps calls and then synchronises, so launch latency is amortised but included. Every
// benchmark reports an error (and runs nothing) without a CUDA device.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "core/device_interface.h"
#include "core/random.h"
#include "core/status.h"
#include "core/tensor.h"
#include "kernels/cuda/gemm.h"
#include "kernels/ops.h"

namespace cctune {
namespace {

constexpr int kReps = 20;
const Device kCuda = Device::Cuda(0);

// The interface of cuda:0, or null after marking the benchmark skipped.
DeviceInterface* CudaOrSkip(benchmark::State& state) {
  auto iface = GetDeviceInterface(DeviceType::kCUDA);
  absl::Status s = iface.status();
  if (s.ok()) {
    auto n = (*iface)->DeviceCount();
    s = !n.ok() ? n.status()
                : (*n > 0 ? absl::OkStatus() : absl::UnavailableError("0 CUDA devices"));
  }
  if (!s.ok()) {
    state.SkipWithError(absl::StrCat("no CUDA device: ", s.message()).c_str());
    return nullptr;
  }
  return *iface;
}

// Random inputs on cuda:0, made once per (shape, dtype, seed, scale): Google Benchmark calls a
// benchmark several times, and filling a 58M-element weight on the host takes seconds.
Tensor Rand(const Shape& s, DType dt, uint64_t seed, double scale = 1.0) {
  static auto* cache = new std::map<std::string, Tensor>();
  const std::string key = absl::StrCat(ShapeToString(s), DTypeName(dt), "/", seed, "/", scale);
  auto it = cache->find(key);
  if (it != cache->end()) return it->second;
  Generator gen(seed);
  Tensor t = ValueOrDie(Tensor::Empty(s, dt, kCuda));
  CCTUNE_CHECK_OK(FillUniform(t, -1.7 * scale, 1.7 * scale, gen));
  cache->emplace(key, t);
  return t;
}

DType Dt(int64_t arg) { return arg ? DType::kBF16 : DType::kF32; }

// Decode-time projection: `rows` tokens through a Llama 3 8B MLP weight [14336, 4096]. Bytes:
// the weight once per call. Through ops::Linear (the GEMV kernel where GemvMaxRows takes it) or,
// with `cublas`, straight through cuda::Gemm (cublasGemmEx, what Linear ran for every m before
// the kernel): the reference the kernel is measured against.
void DecodeProduct(benchmark::State& state, bool cublas) {
  DeviceInterface* iface = CudaOrSkip(state);
  if (iface == nullptr) return;
  const int64_t rows = state.range(0);
  const DType dt = Dt(state.range(1));
  const Tensor x = Rand({rows, 4096}, dt, 1);
  const Tensor w = Rand({14336, 4096}, dt, 2, 0.02);
  const Tensor wt = ValueOrDie(w.Transpose(0, 1));
  Tensor out = ValueOrDie(Tensor::Empty({rows, 14336}, dt, kCuda));
  auto call = [&]() -> absl::Status {
#ifdef CCTUNE_WITH_CUDA
    if (cublas) return cuda::Gemm(out, x, wt, nullptr, dt);
#endif
    return ops::Linear(out, x, w);
  };
  // One untimed call first: a library's first call of a shape loads its kernels (cuBLAS:
  // ~60-130 ms, which a short run would report as the speed).
  CCTUNE_CHECK_OK(call());
  CCTUNE_CHECK_OK(iface->Synchronize(0));
  double enqueue_s = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < kReps; ++r) CCTUNE_CHECK_OK(call());
    enqueue_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CCTUNE_CHECK_OK(iface->Synchronize(0));
  }
  // Host time to enqueue one call (validation, dispatch, launch): the floor of a decode step
  // when it exceeds the kernel's own time.
  state.counters["enqueue_us"] = 1e6 * enqueue_s / std::max<int64_t>(1, state.iterations() * kReps);
  state.SetBytesProcessed(state.iterations() * kReps * static_cast<int64_t>(w.nbytes()));
}
void BM_LinearDecode(benchmark::State& state) { DecodeProduct(state, /*cublas=*/false); }
void BM_CublasDecode(benchmark::State& state) { DecodeProduct(state, /*cublas=*/true); }
BENCHMARK(BM_LinearDecode)->ArgsProduct({{1, 2, 3, 4, 6, 8}, {0, 1}})->ArgNames({"rows", "bf16"})->UseRealTime();
BENCHMARK(BM_CublasDecode)->ArgsProduct({{1, 2, 3, 4, 6, 8}, {0, 1}})->ArgNames({"rows", "bf16"})->UseRealTime();

// Prefill / training-size product: [m, 4096] x [4096, 4096]ᵀ.
void BM_LinearPrefill(benchmark::State& state) {
  DeviceInterface* iface = CudaOrSkip(state);
  if (iface == nullptr) return;
  const int64_t m = state.range(0);
  const DType dt = Dt(state.range(1));
  const Tensor x = Rand({m, 4096}, dt, 1);
  const Tensor w = Rand({4096, 4096}, dt, 2, 0.02);
  Tensor out = ValueOrDie(Tensor::Empty({m, 4096}, dt, kCuda));
  for (auto _ : state) {
    for (int r = 0; r < kReps; ++r) CCTUNE_CHECK_OK(ops::Linear(out, x, w));
    CCTUNE_CHECK_OK(iface->Synchronize(0));
  }
  state.counters["FLOP/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * kReps * 2.0 * m * 4096 * 4096,
                         benchmark::Counter::kIsRate);
}
BENCHMARK(BM_LinearPrefill)
    ->ArgsProduct({{512, 2048}, {0, 1}})
    ->ArgNames({"m", "bf16"})
    ->UseRealTime();

// Decode: one query per head against a KV cache (Llama 3 8B heads: 32 / 8 x 128).
void BM_AttentionDecode(benchmark::State& state) {
  DeviceInterface* iface = CudaOrSkip(state);
  if (iface == nullptr) return;
  const int64_t s_kv = state.range(0);
  const DType dt = Dt(state.range(1));
  const int64_t n_h = 32, n_kv = 8, hd = 128;
  const Tensor q = Rand({1, n_h, 1, hd}, dt, 1);
  const Tensor k = Rand({1, n_kv, s_kv, hd}, dt, 2);
  const Tensor v = Rand({1, n_kv, s_kv, hd}, dt, 3);
  Tensor out = ValueOrDie(Tensor::Empty({1, n_h, 1, hd}, dt, kCuda));
  ops::AttentionOptions opt;
  opt.causal = true;
  CCTUNE_CHECK_OK(ops::Attention(out, q, k, v, opt));  // untimed first call
  CCTUNE_CHECK_OK(iface->Synchronize(0));
  double enqueue_s = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < kReps; ++r) CCTUNE_CHECK_OK(ops::Attention(out, q, k, v, opt));
    enqueue_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CCTUNE_CHECK_OK(iface->Synchronize(0));
  }
  // Host time to enqueue one call (validation, dispatch, launch): the floor of a decode step
  // when it exceeds the kernel's own time.
  state.counters["enqueue_us"] = 1e6 * enqueue_s / std::max<int64_t>(1, state.iterations() * kReps);
  state.SetBytesProcessed(state.iterations() * kReps *
                          static_cast<int64_t>(k.nbytes() + v.nbytes()));
}
BENCHMARK(BM_AttentionDecode)
    ->ArgsProduct({{512, 4096, 32768}, {0, 1}})
    ->ArgNames({"s_kv", "bf16"})
    ->UseRealTime();

// Causal prefill of s tokens (FLOPs: 2 matmuls of s x s/2 x h_d per head).
void BM_AttentionPrefill(benchmark::State& state) {
  DeviceInterface* iface = CudaOrSkip(state);
  if (iface == nullptr) return;
  const int64_t s = state.range(0);
  const int64_t n_h = 32, n_kv = 8, hd = 128;
  const Tensor q = Rand({1, n_h, s, hd}, DType::kBF16, 1);
  const Tensor k = Rand({1, n_kv, s, hd}, DType::kBF16, 2);
  const Tensor v = Rand({1, n_kv, s, hd}, DType::kBF16, 3);
  Tensor out = ValueOrDie(Tensor::Empty({1, n_h, s, hd}, DType::kBF16, kCuda));
  ops::AttentionOptions opt;
  opt.causal = true;
  for (auto _ : state) {
    CCTUNE_CHECK_OK(ops::Attention(out, q, k, v, opt));
    CCTUNE_CHECK_OK(iface->Synchronize(0));
  }
  state.counters["FLOP/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * 2.0 * s * s * hd * n_h,
                         benchmark::Counter::kIsRate);
}
BENCHMARK(BM_AttentionPrefill)->Arg(512)->Arg(2048)->UseRealTime();

// Training attention (Llama 3 8B heads, bf16 q/k/v, causal): AttentionWithLse (backward=0), or
// AttentionBackward with the saved out and lse (backward=1). FLOP/s counts the matmuls of the
// causal half: 2 for the forward and 5 for the backward (FlashAttention-2's convention; the
// kernels recompute S and dP in both the dk/dv and the dq pass, 7 in all).
void BM_AttentionTrain(benchmark::State& state) {
  DeviceInterface* iface = CudaOrSkip(state);
  if (iface == nullptr) return;
  const int64_t s = state.range(0);
  const bool backward = state.range(1) != 0;
  const int64_t n_h = 32, n_kv = 8, hd = 128;
  const Tensor q = Rand({1, n_h, s, hd}, DType::kBF16, 1);
  const Tensor k = Rand({1, n_kv, s, hd}, DType::kBF16, 2);
  const Tensor v = Rand({1, n_kv, s, hd}, DType::kBF16, 3);
  const Tensor dy = Rand({1, n_h, s, hd}, DType::kF32, 4);
  Tensor out = ValueOrDie(Tensor::Empty({1, n_h, s, hd}, DType::kBF16, kCuda));
  Tensor lse = ValueOrDie(Tensor::Empty({1, n_h, s}, DType::kF32, kCuda));
  Tensor dq = ValueOrDie(Tensor::Zeros({1, n_h, s, hd}, DType::kF32, kCuda));
  Tensor dk = ValueOrDie(Tensor::Zeros({1, n_kv, s, hd}, DType::kF32, kCuda));
  Tensor dv = ValueOrDie(Tensor::Zeros({1, n_kv, s, hd}, DType::kF32, kCuda));
  ops::AttentionOptions opt;
  opt.causal = true;
  CCTUNE_CHECK_OK(ops::AttentionWithLse(out, lse, q, k, v, opt));
  for (auto _ : state) {
    if (backward) {
      CCTUNE_CHECK_OK(ops::AttentionBackward(dq, dk, dv, dy, q, k, v, &out, &lse, opt));
    } else {
      CCTUNE_CHECK_OK(ops::AttentionWithLse(out, lse, q, k, v, opt));
    }
    CCTUNE_CHECK_OK(iface->Synchronize(0));
  }
  const double matmuls = backward ? 5.0 : 2.0;
  state.counters["FLOP/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * matmuls * s * s * hd * n_h,
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_AttentionTrain)
    ->ArgsProduct({{512, 2048}, {0, 1}})
    ->ArgNames({"s", "backward"})
    ->UseRealTime();

void BM_RmsNorm(benchmark::State& state) {
  DeviceInterface* iface = CudaOrSkip(state);
  if (iface == nullptr) return;
  const DType dt = Dt(state.range(0));
  const Tensor x = Rand({2048, 4096}, dt, 1);
  const Tensor w = Rand({4096}, dt, 2);
  Tensor out = ValueOrDie(Tensor::Empty({2048, 4096}, dt, kCuda));
  for (auto _ : state) {
    for (int r = 0; r < kReps; ++r) CCTUNE_CHECK_OK(ops::RmsNorm(out, x, w, 1e-5f));
    CCTUNE_CHECK_OK(iface->Synchronize(0));
  }
  state.SetBytesProcessed(state.iterations() * kReps * 2 * static_cast<int64_t>(x.nbytes()));
}
BENCHMARK(BM_RmsNorm)->Arg(0)->Arg(1)->ArgName("bf16")->UseRealTime();

void BM_SiluMul(benchmark::State& state) {
  DeviceInterface* iface = CudaOrSkip(state);
  if (iface == nullptr) return;
  const DType dt = Dt(state.range(0));
  const Tensor g = Rand({2048, 14336}, dt, 1), u = Rand({2048, 14336}, dt, 2);
  Tensor out = ValueOrDie(Tensor::Empty({2048, 14336}, dt, kCuda));
  for (auto _ : state) {
    for (int r = 0; r < kReps; ++r) CCTUNE_CHECK_OK(ops::SiluMul(out, g, u));
    CCTUNE_CHECK_OK(iface->Synchronize(0));
  }
  state.SetBytesProcessed(state.iterations() * kReps * 3 * static_cast<int64_t>(g.nbytes()));
}
BENCHMARK(BM_SiluMul)->Arg(0)->Arg(1)->ArgName("bf16")->UseRealTime();

// The decode tail: softmax, argmax and top-k over a Llama 3 vocabulary.
void BM_VocabOps(benchmark::State& state) {
  DeviceInterface* iface = CudaOrSkip(state);
  if (iface == nullptr) return;
  const int64_t v = 128256;
  const Tensor logits = Rand({1, v}, DType::kF32, 1, 3.0);
  Tensor probs = ValueOrDie(Tensor::Empty({1, v}, DType::kF32, kCuda));
  Tensor arg = ValueOrDie(Tensor::Empty({1}, DType::kI64, kCuda));
  Tensor top_v = ValueOrDie(Tensor::Empty({1, 50}, DType::kF32, kCuda));
  Tensor top_i = ValueOrDie(Tensor::Empty({1, 50}, DType::kI64, kCuda));
  const int which = static_cast<int>(state.range(0));
  for (auto _ : state) {
    for (int r = 0; r < kReps; ++r) {
      if (which == 0) CCTUNE_CHECK_OK(ops::Softmax(probs, logits));
      if (which == 1) CCTUNE_CHECK_OK(ops::Argmax(arg, logits));
      if (which == 2) CCTUNE_CHECK_OK(ops::TopK(top_v, top_i, logits, 50));
    }
    CCTUNE_CHECK_OK(iface->Synchronize(0));
  }
  state.SetLabel(which == 0 ? "softmax" : which == 1 ? "argmax" : "topk50");
  state.SetBytesProcessed(state.iterations() * kReps * static_cast<int64_t>(logits.nbytes()));
}
BENCHMARK(BM_VocabOps)->DenseRange(0, 2)->ArgName("op")->UseRealTime();

// ---- Training ops (backward_kernels.cu, loss_kernels.cu) ----

// Cross-entropy over a Llama 3 vocabulary, 2048 rows: forward (loss) or backward (in place,
// dlogits is logits, as the trainer runs it). Bytes: the logits read (forward), or read and
// written (backward).
void BM_CrossEntropy(benchmark::State& state) {
  DeviceInterface* iface = CudaOrSkip(state);
  if (iface == nullptr) return;
  const int64_t n = 2048, v = 128256;
  const bool backward = state.range(0) != 0;
  const Tensor logits = Rand({n, v}, DType::kF32, 1, 3.0);
  Tensor work = ValueOrDie(logits.Clone());
  const Tensor targets = ValueOrDie(ValueOrDie(Tensor::Zeros({n}, DType::kI64)).To(kCuda));
  Tensor loss = ValueOrDie(Tensor::Empty({}, DType::kF32, kCuda));
  Tensor count = ValueOrDie(Tensor::Empty({}, DType::kI64, kCuda));
  for (auto _ : state) {
    for (int r = 0; r < kReps; ++r) {
      if (backward) {
        CCTUNE_CHECK_OK(ops::CrossEntropyBackward(work, work, targets, 1.f / n));
      } else {
        CCTUNE_CHECK_OK(ops::CrossEntropyForward(loss, count, nullptr, logits, targets));
      }
    }
    CCTUNE_CHECK_OK(iface->Synchronize(0));
  }
  state.SetLabel(backward ? "backward" : "forward");
  state.SetBytesProcessed(state.iterations() * kReps * (backward ? 2 : 1) *
                          static_cast<int64_t>(logits.nbytes()));
}
BENCHMARK(BM_CrossEntropy)->Arg(0)->Arg(1)->ArgName("backward")->UseRealTime();

// dx, dw (and dbias) of a [2048, 4096] x [4096, 4096]ᵀ projection: 2 GEMMs.
void BM_LinearBackward(benchmark::State& state) {
  DeviceInterface* iface = CudaOrSkip(state);
  if (iface == nullptr) return;
  const int64_t m = 2048, k = 4096, n = 4096;
  const DType dt = Dt(state.range(0));
  const Tensor x = Rand({m, k}, dt, 1);
  const Tensor w = Rand({n, k}, dt, 2, 0.02);
  const Tensor dy = Rand({m, n}, DType::kF32, 3);
  Tensor dx = ValueOrDie(Tensor::Zeros({m, k}, DType::kF32, kCuda));
  Tensor dw = ValueOrDie(Tensor::Zeros({n, k}, DType::kF32, kCuda));
  Tensor db = ValueOrDie(Tensor::Zeros({n}, DType::kF32, kCuda));
  for (auto _ : state) {
    CCTUNE_CHECK_OK(ops::LinearBackward(&dx, &dw, &db, dy, x, w));
    CCTUNE_CHECK_OK(iface->Synchronize(0));
  }
  state.counters["FLOP/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * 4.0 * m * n * k, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_LinearBackward)->Arg(0)->Arg(1)->ArgName("bf16")->UseRealTime();

// Bytes: x, dy read, dx read and written (dweight's partials are small).
void BM_RmsNormBackward(benchmark::State& state) {
  DeviceInterface* iface = CudaOrSkip(state);
  if (iface == nullptr) return;
  const DType dt = Dt(state.range(0));
  const Tensor x = Rand({2048, 4096}, dt, 1);
  const Tensor w = Rand({4096}, dt, 2);
  const Tensor dy = Rand({2048, 4096}, DType::kF32, 3);
  Tensor dx = ValueOrDie(Tensor::Zeros({2048, 4096}, DType::kF32, kCuda));
  Tensor dw = ValueOrDie(Tensor::Zeros({4096}, DType::kF32, kCuda));
  for (auto _ : state) {
    for (int r = 0; r < kReps; ++r) CCTUNE_CHECK_OK(ops::RmsNormBackward(dx, &dw, dy, x, w, 1e-5f));
    CCTUNE_CHECK_OK(iface->Synchronize(0));
  }
  state.SetBytesProcessed(state.iterations() * kReps *
                          static_cast<int64_t>(x.nbytes() + 3 * dy.nbytes()));
}
BENCHMARK(BM_RmsNormBackward)->Arg(0)->Arg(1)->ArgName("bf16")->UseRealTime();

// Bytes: gate, up, dy read; dgate, dup read and written.
void BM_SiluMulBackward(benchmark::State& state) {
  DeviceInterface* iface = CudaOrSkip(state);
  if (iface == nullptr) return;
  const DType dt = Dt(state.range(0));
  const Tensor g = Rand({2048, 14336}, dt, 1), u = Rand({2048, 14336}, dt, 2);
  const Tensor dy = Rand({2048, 14336}, DType::kF32, 3);
  Tensor dg = ValueOrDie(Tensor::Zeros({2048, 14336}, DType::kF32, kCuda));
  Tensor du = ValueOrDie(Tensor::Zeros({2048, 14336}, DType::kF32, kCuda));
  for (auto _ : state) {
    for (int r = 0; r < kReps; ++r) CCTUNE_CHECK_OK(ops::SiluMulBackward(dg, du, dy, g, u));
    CCTUNE_CHECK_OK(iface->Synchronize(0));
  }
  state.SetBytesProcessed(state.iterations() * kReps *
                          static_cast<int64_t>(2 * g.nbytes() + 5 * dy.nbytes()));
}
BENCHMARK(BM_SiluMulBackward)->Arg(0)->Arg(1)->ArgName("bf16")->UseRealTime();

// 2048 token ids (many repeated) into a [128256, 4096] table gradient. Bytes: dy read, the
// touched table rows read and written. Includes the ids' trip to the host and the sort.
void BM_EmbeddingBackward(benchmark::State& state) {
  DeviceInterface* iface = CudaOrSkip(state);
  if (iface == nullptr) return;
  const int64_t v = 128256, d = 4096, n = 2048;
  Generator gen(4);
  std::vector<int64_t> id(n);
  for (int64_t& i : id) i = static_cast<int64_t>(gen.Uniform() * 1000);
  const Tensor ids = ValueOrDie(ValueOrDie(Tensor::FromVector(id, {n})).To(kCuda));
  const Tensor dy = Rand({n, d}, DType::kF32, 5);
  Tensor table = ValueOrDie(Tensor::Zeros({v, d}, DType::kF32, kCuda));
  for (auto _ : state) {
    CCTUNE_CHECK_OK(ops::EmbeddingBackward(table, dy, ids));
    CCTUNE_CHECK_OK(iface->Synchronize(0));
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(dy.nbytes()));
}
BENCHMARK(BM_EmbeddingBackward)->UseRealTime();

}  // namespace
}  // namespace cctune
