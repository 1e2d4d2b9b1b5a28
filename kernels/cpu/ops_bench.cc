// CPU op benchmarks (bazel run -c opt //kernels/cpu:ops_bench): attention decode/prefill,
// the memory-bound layers and sampling, and the training ops (backward passes, cross-entropy)
// next to their forwards, reporting bytes/s or FLOP/s.
#include <cstdint>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/random.h"
#include "core/status.h"
#include "core/tensor.h"
#include "kernels/ops.h"

namespace cctune {
namespace {

Tensor Rand(const Shape& s, DType dt, uint64_t seed) {
  Generator gen(seed);
  return ValueOrDie(RandomNormal(s, dt, gen));
}

// Decode: one query per head against a KV cache of s_kv keys (Llama 3 8B heads: 32 / 8 x 128).
void BM_AttentionDecode(benchmark::State& state) {
  const int64_t s_kv = state.range(0);
  const DType kv_type = state.range(1) ? DType::kBF16 : DType::kF32;
  const int64_t n_h = 32, n_kv = 8, hd = 128;
  const Tensor q = Rand({1, n_h, 1, hd}, DType::kF32, 1);
  const Tensor k = Rand({1, n_kv, s_kv, hd}, kv_type, 2);
  const Tensor v = Rand({1, n_kv, s_kv, hd}, kv_type, 3);
  Tensor out = ValueOrDie(Tensor::Empty({1, n_h, 1, hd}, DType::kF32));
  ops::AttentionOptions opt;
  opt.causal = true;
  for (auto _ : state) CCTUNE_CHECK_OK(ops::Attention(out, q, k, v, opt));
  state.SetBytesProcessed(state.iterations() * (k.nbytes() + v.nbytes()));
}
BENCHMARK(BM_AttentionDecode)
    ->ArgsProduct({{512, 4096}, {0, 1}})
    ->ArgNames({"s_kv", "bf16"})
    ->UseRealTime();

// Causal prefill of s tokens (FLOPs: 2 matmuls of s x s/2 x h_d per head).
void BM_AttentionPrefill(benchmark::State& state) {
  const int64_t s = state.range(0);
  const int64_t n_h = 32, n_kv = 8, hd = 128;
  const Tensor q = Rand({1, n_h, s, hd}, DType::kF32, 1);
  const Tensor k = Rand({1, n_kv, s, hd}, DType::kF32, 2);
  const Tensor v = Rand({1, n_kv, s, hd}, DType::kF32, 3);
  Tensor out = ValueOrDie(Tensor::Empty({1, n_h, s, hd}, DType::kF32));
  ops::AttentionOptions opt;
  opt.causal = true;
  for (auto _ : state) CCTUNE_CHECK_OK(ops::Attention(out, q, k, v, opt));
  state.counters["FLOP/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * 2.0 * s * s * hd * n_h,
                         benchmark::Counter::kIsRate);
}
BENCHMARK(BM_AttentionPrefill)->Arg(512)->UseRealTime();

void BM_RmsNorm(benchmark::State& state) {
  const DType dt = state.range(0) ? DType::kBF16 : DType::kF32;
  const Tensor x = Rand({64, 4096}, dt, 1);
  const Tensor w = Rand({4096}, dt, 2);
  Tensor out = ValueOrDie(Tensor::Empty({64, 4096}, dt));
  for (auto _ : state) CCTUNE_CHECK_OK(ops::RmsNorm(out, x, w, 1e-5f));
  state.SetBytesProcessed(state.iterations() * 2 * x.nbytes());
}
BENCHMARK(BM_RmsNorm)->Arg(0)->Arg(1)->UseRealTime();

void BM_SiluMul(benchmark::State& state) {
  const DType dt = state.range(0) ? DType::kBF16 : DType::kF32;
  const Tensor g = Rand({64, 14336}, dt, 1);
  const Tensor u = Rand({64, 14336}, dt, 2);
  Tensor out = ValueOrDie(Tensor::Empty({64, 14336}, dt));
  for (auto _ : state) CCTUNE_CHECK_OK(ops::SiluMul(out, g, u));
  state.SetBytesProcessed(state.iterations() * 3 * g.nbytes());
}
BENCHMARK(BM_SiluMul)->Arg(0)->Arg(1)->UseRealTime();

void BM_Add(benchmark::State& state) {
  const Tensor a = Rand({64, 4096}, DType::kF32, 1);
  const Tensor b = Rand({64, 4096}, DType::kF32, 2);
  Tensor out = ValueOrDie(Tensor::Empty({64, 4096}, DType::kF32));
  for (auto _ : state) CCTUNE_CHECK_OK(ops::Add(out, a, b));
  state.SetBytesProcessed(state.iterations() * 3 * a.nbytes());
}
BENCHMARK(BM_Add)->UseRealTime();

void BM_Rope(benchmark::State& state) {
  const int64_t s = 64, n = 32, hd = 128;
  const Tensor inv = ValueOrDie(ops::RopeInvFrequencies(hd, 500000.0));
  Tensor cos = ValueOrDie(Tensor::Empty({8192, hd / 2}, DType::kF32));
  Tensor sin = ValueOrDie(Tensor::Empty({8192, hd / 2}, DType::kF32));
  CCTUNE_CHECK_OK(ops::RopeCache(cos, sin, inv));
  Tensor x = Rand({1, s, n, hd}, DType::kF32, 1);
  std::vector<int64_t> p(s);
  for (int64_t i = 0; i < s; ++i) p[i] = 100 + i;
  const Tensor pos = ValueOrDie(Tensor::FromVector(absl::Span<const int64_t>(p), {s}));
  for (auto _ : state) {
    CCTUNE_CHECK_OK(ops::Rope(x, x, cos, sin, pos, ops::RopePairing::kInterleaved));
  }
  state.SetBytesProcessed(state.iterations() * 2 * x.nbytes());
}
BENCHMARK(BM_Rope)->UseRealTime();

// Llama 3 vocabulary, one row: top-k/top-p sampling and greedy.
void BM_Sample(benchmark::State& state) {
  const Tensor logits = Rand({1, 128256}, DType::kF32, 1);
  Tensor out = ValueOrDie(Tensor::Empty({1}, DType::kI64));
  ops::SamplingParams p;
  p.temperature = state.range(0) ? 0.6f : 0.f;
  p.top_k = state.range(1);
  p.top_p = state.range(2) ? 0.9f : 1.f;
  Generator gen(1);
  for (auto _ : state) CCTUNE_CHECK_OK(ops::Sample(out, logits, p, gen));
  state.SetBytesProcessed(state.iterations() * logits.nbytes());
}
BENCHMARK(BM_Sample)
    ->Args({0, 0, 0})
    ->Args({1, 0, 0})
    ->Args({1, 50, 0})
    ->Args({1, 0, 1})
    ->ArgNames({"temp", "top_k", "top_p"})
    ->UseRealTime();

// ---- Training ----

// Linear forward and backward (dx and dw) over m tokens, [n, k] weights: 2mnk and 4mnk FLOPs.
void BM_LinearTraining(benchmark::State& state) {
  const bool backward = state.range(0);
  const DType wt = state.range(1) ? DType::kBF16 : DType::kF32;
  const int64_t m = 512, n = 1024, k = 1024;
  const Tensor x = Rand({m, k}, DType::kF32, 1);
  const Tensor w = Rand({n, k}, wt, 2);
  const Tensor dy = Rand({m, n}, DType::kF32, 3);
  Tensor out = ValueOrDie(Tensor::Empty({m, n}, DType::kF32));
  Tensor dx = ValueOrDie(Tensor::Zeros({m, k}, DType::kF32));
  Tensor dw = ValueOrDie(Tensor::Zeros({n, k}, DType::kF32));
  for (auto _ : state) {
    if (backward) {
      CCTUNE_CHECK_OK(ops::LinearBackward(&dx, &dw, nullptr, dy, x, w));
    } else {
      CCTUNE_CHECK_OK(ops::Linear(out, x, w));
    }
  }
  state.counters["FLOP/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * (backward ? 4.0 : 2.0) * m * n * k,
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_LinearTraining)
    ->ArgsProduct({{0, 1}, {0, 1}})
    ->ArgNames({"backward", "bf16"})
    ->UseRealTime();

// Causal attention of s tokens, forward (with lse) and backward (given out and lse). FLOPs are
// counted as matmul work over the causal half: forward 2 products, backward 5 (recomputed S,
// dP, dV, dQ, dK), 2 · (s²/2) · h_d each per head.
void BM_AttentionTraining(benchmark::State& state) {
  const bool backward = state.range(0);
  const int64_t s = 512, n_h = 8, n_kv = 2, hd = 64;
  const Tensor q = Rand({1, n_h, s, hd}, DType::kF32, 1);
  const Tensor k = Rand({1, n_kv, s, hd}, DType::kF32, 2);
  const Tensor v = Rand({1, n_kv, s, hd}, DType::kF32, 3);
  const Tensor dy = Rand({1, n_h, s, hd}, DType::kF32, 4);
  Tensor out = ValueOrDie(Tensor::Empty({1, n_h, s, hd}, DType::kF32));
  Tensor lse = ValueOrDie(Tensor::Empty({1, n_h, s}, DType::kF32));
  Tensor dq = ValueOrDie(Tensor::Zeros(q.shape(), DType::kF32));
  Tensor dk = ValueOrDie(Tensor::Zeros(k.shape(), DType::kF32));
  Tensor dv = ValueOrDie(Tensor::Zeros(v.shape(), DType::kF32));
  ops::AttentionOptions opt;
  opt.causal = true;
  CCTUNE_CHECK_OK(ops::AttentionWithLse(out, lse, q, k, v, opt));
  for (auto _ : state) {
    if (backward) {
      CCTUNE_CHECK_OK(ops::AttentionBackward(dq, dk, dv, dy, q, k, v, &out, &lse, opt));
    } else {
      CCTUNE_CHECK_OK(ops::AttentionWithLse(out, lse, q, k, v, opt));
    }
  }
  state.counters["FLOP/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * (backward ? 5.0 : 2.0) * s * s * hd * n_h,
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_AttentionTraining)->Arg(0)->Arg(1)->ArgName("backward")->UseRealTime();

// Cross-entropy forward and backward (in place) over a 32000 vocabulary.
void BM_CrossEntropy(benchmark::State& state) {
  const bool backward = state.range(0);
  const int64_t n = 64, v = 32000;
  Tensor logits = Rand({n, v}, DType::kF32, 1);
  std::vector<int64_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = (i * 7919) % v;
  const Tensor targets = ValueOrDie(Tensor::FromVector(absl::Span<const int64_t>(t), {n}));
  Tensor loss = ValueOrDie(Tensor::Empty({}, DType::kF32));
  Tensor count = ValueOrDie(Tensor::Empty({}, DType::kI64));
  for (auto _ : state) {
    if (backward) {
      CCTUNE_CHECK_OK(ops::CrossEntropyBackward(logits, logits, targets, 1e-3f));
    } else {
      CCTUNE_CHECK_OK(ops::CrossEntropyForward(loss, count, nullptr, logits, targets));
    }
  }
  state.SetBytesProcessed(state.iterations() * (backward ? 2 : 1) * logits.nbytes());
}
BENCHMARK(BM_CrossEntropy)->Arg(0)->Arg(1)->ArgName("backward")->UseRealTime();

void BM_RmsNormBackward(benchmark::State& state) {
  const Tensor x = Rand({512, 4096}, DType::kF32, 1);
  const Tensor w = Rand({4096}, DType::kF32, 2);
  const Tensor dy = Rand({512, 4096}, DType::kF32, 3);
  Tensor dx = ValueOrDie(Tensor::Zeros({512, 4096}, DType::kF32));
  Tensor dw = ValueOrDie(Tensor::Zeros({4096}, DType::kF32));
  for (auto _ : state) CCTUNE_CHECK_OK(ops::RmsNormBackward(dx, &dw, dy, x, w, 1e-5f));
  state.SetBytesProcessed(state.iterations() * 4 * x.nbytes());  // x, dy, dx read + dx write
}
BENCHMARK(BM_RmsNormBackward)->UseRealTime();

}  // namespace
}  // namespace cctune
