// One decoder layer on the CPU, Llama 3.2 1B shape (d 2048, GQA 32/8, h_d 64, ffn 8192):
//   BM_Prefill: a causal forward over s tokens, no cache; reports tokens/s and GFLOP/s.
//   BM_Decode:  one token against a KV cache filled to `ctx` positions; reports tokens/s and
//               the bandwidth achieved, counting the layer's weights plus the filled K/V read
//               per token (what decode has to stream from memory).
// Arguments: weight dtype (0 f32, 1 bf16), then s or ctx, then (decode) the cache layout
// (0 grouped, 1 expanded). Run: bazel run -c opt //modules:decoder_layer_bench
#include <memory>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/random.h"
#include "core/status.h"
#include "modules/parameters.h"
#include "modules/transformer_self_attention_layer.h"

namespace cctune {
namespace {

constexpr int64_t kDim = 2048, kHeads = 32, kKvHeads = 8, kHeadDim = 64, kFfn = 8192;
constexpr int64_t kMaxSeqLen = 4096;

struct Layer {
  std::unique_ptr<TransformerSelfAttentionLayer> layer;
  ParameterArena arena;
};

Layer MakeLayer(DType weight_dtype) {
  MultiHeadAttentionArgs a;
  a.embed_dim = kDim;
  a.num_heads = kHeads;
  a.num_kv_heads = kKvHeads;
  a.head_dim = kHeadDim;
  a.q_proj = std::make_unique<Linear>(kDim, kHeads * kHeadDim);
  a.k_proj = std::make_unique<Linear>(kDim, kKvHeads * kHeadDim);
  a.v_proj = std::make_unique<Linear>(kDim, kKvHeads * kHeadDim);
  a.output_proj = std::make_unique<Linear>(kHeads * kHeadDim, kDim);
  ops::RopeScaling scaling;
  scaling.factor = 32;
  a.pos_embeddings = std::make_shared<RotaryPositionalEmbeddings>(
      kHeadDim, kMaxSeqLen, 500000.0, ops::RopePairing::kInterleaved, scaling);
  a.max_seq_len = kMaxSeqLen;
  auto mlp = ValueOrDie(FeedForward::Create(std::make_unique<Linear>(kDim, kFfn),
                                            std::make_unique<Linear>(kFfn, kDim),
                                            std::make_unique<Linear>(kDim, kFfn)));
  Layer l;
  l.layer = ValueOrDie(TransformerSelfAttentionLayer::Create(
      ValueOrDie(MultiHeadAttention::Create(std::move(a))), std::move(mlp),
      std::make_unique<RMSNorm>(kDim, 1e-5f), std::make_unique<RMSNorm>(kDim, 1e-5f)));
  l.arena = ValueOrDie(ParameterArena::Create(*l.layer, weight_dtype, Device::Cpu()));
  Generator gen(1);
  CCTUNE_CHECK_OK(l.arena.InitializeRandom(gen));
  return l;
}

Tensor CausalRows(int64_t start, int64_t len, int64_t cols) {
  Tensor m = ValueOrDie(Tensor::Empty({1, len, cols}, DType::kBool));
  for (int64_t i = 0; i < len; ++i) {
    for (int64_t j = 0; j < cols; ++j) m.data<bool>()[i * cols + j] = j <= start + i;
  }
  return m;
}

Tensor Positions(int64_t start, int64_t len) {
  std::vector<int64_t> p(len);
  for (int64_t i = 0; i < len; ++i) p[i] = start + i;
  return ValueOrDie(Tensor::FromVector(p, {1, len}));
}

void BM_Prefill(benchmark::State& state) {
  const DType dtype = state.range(0) == 0 ? DType::kF32 : DType::kBF16;
  const int64_t s = state.range(1);
  Layer l = MakeLayer(dtype);
  Generator gen(2);
  Tensor x = ValueOrDie(RandomNormal({1, s, kDim}, DType::kF32, gen));
  Tensor out = ValueOrDie(Tensor::Empty({1, s, kDim}, DType::kF32));
  for (auto _ : state) {
    CCTUNE_CHECK_OK(l.layer->Forward(out, x));
    benchmark::DoNotOptimize(out.raw_data());
  }
  const double matmul_flops = 2.0 * static_cast<double>(l.arena.NumParameters()) * s;
  const double attn_flops = 2.0 * 2.0 * kHeads * kHeadDim * s * (s + 1) / 2.0;
  state.SetItemsProcessed(state.iterations() * s);
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(s), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = benchmark::Counter((matmul_flops + attn_flops) / 1e9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(DTypeName(dtype));
}

void BM_Decode(benchmark::State& state) {
  const DType dtype = state.range(0) == 0 ? DType::kF32 : DType::kBF16;
  const int64_t ctx = state.range(1);
  const KvCacheLayout layout =
      state.range(2) == 0 ? KvCacheLayout::kGrouped : KvCacheLayout::kExpanded;
  constexpr int64_t kSteps = 32;  // decode steps between refills, keeping the context ~ctx
  Layer l = MakeLayer(dtype);
  MultiHeadAttention& attn = l.layer->attn();
  CCTUNE_CHECK_OK(attn.SetupCache(1, dtype, ctx + kSteps, layout));
  Generator gen(3);
  Tensor prompt = ValueOrDie(RandomNormal({1, ctx, kDim}, DType::kF32, gen));
  Tensor prompt_out = ValueOrDie(Tensor::Empty({1, ctx, kDim}, DType::kF32));
  Tensor x = ValueOrDie(RandomNormal({1, 1, kDim}, DType::kF32, gen));
  Tensor out = ValueOrDie(Tensor::Empty({1, 1, kDim}, DType::kF32));
  auto refill = [&] {
    CCTUNE_CHECK_OK(attn.ResetCache());
    Tensor mask = CausalRows(0, ctx, ctx + kSteps);
    Tensor pos = Positions(0, ctx);
    CCTUNE_CHECK_OK(l.layer->Forward(prompt_out, prompt, &mask, &pos));
  };
  refill();
  std::vector<Tensor> masks, positions;
  for (int64_t t = 0; t < kSteps; ++t) {
    masks.push_back(CausalRows(ctx + t, 1, ctx + kSteps));
    positions.push_back(Positions(ctx + t, 1));
  }
  const size_t weight_bytes = l.arena.Bytes();
  const int64_t cache_heads = layout == KvCacheLayout::kGrouped ? kKvHeads : kHeads;
  double bytes = 0;
  for (auto _ : state) {
    int64_t t = attn.kv_cache()->Size() - ctx;
    if (t == kSteps) {
      state.PauseTiming();
      refill();
      state.ResumeTiming();
      t = 0;
    }
    CCTUNE_CHECK_OK(l.layer->Forward(out, x, &masks[t], &positions[t]));
    benchmark::DoNotOptimize(out.raw_data());
    bytes += static_cast<double>(weight_bytes) +
             2.0 * cache_heads * (ctx + t + 1) * kHeadDim * DTypeSize(dtype);
  }
  state.counters["tokens/s"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GB/s"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsRate);
  state.counters["kv_MiB"] = static_cast<double>(attn.kv_cache()->Bytes()) / (1 << 20);
  state.SetLabel(std::string(DTypeName(dtype)) + " " + KvCacheLayoutName(layout));
}

BENCHMARK(BM_Prefill)
    ->ArgNames({"bf16", "s"})
    ->Args({0, 16})
    ->Args({0, 128})
    ->Args({1, 128})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_Decode)
    ->ArgNames({"bf16", "ctx", "expanded"})
    ->Args({0, 128, 0})
    ->Args({0, 1024, 0})
    ->Args({0, 1024, 1})
    ->Args({1, 1024, 0})
    ->Args({1, 1024, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace cctune
