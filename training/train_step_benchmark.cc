// Training throughput of TrainStep (forward, backward, clip, AdamW) for a ~15M-parameter
// Llama-style decoder on the CPU:
//   bazel run -c opt //training:train_step_benchmark
// Reports tokens/s and achieved GFLOP/s, counting 6 · (non-embedding parameters + output
// projection) FLOPs per token plus the attention's 12 · layers · s · d per token (forward and
// backward of QKᵀ and PV under a causal mask counted in full, as llm.c does).
#include <cstdint>
#include <memory>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/random.h"
#include "core/status.h"
#include "models/decoder_builder.h"
#include "modules/parameters.h"
#include "training/decoder_trainer.h"
#include "training/optim.h"
#include "training/train_step.h"

namespace cctune {
namespace {

void BM_TrainStep(benchmark::State& state) {
  const bool checkpointing = state.range(0) != 0;
  DecoderConfig c;
  c.vocab_size = 8192;
  c.num_layers = 6;
  c.num_heads = 6;
  c.num_kv_heads = 2;
  c.embed_dim = 384;
  c.intermediate_dim = 1024;
  c.max_seq_len = 256;
  c.tie_word_embeddings = true;
  const int64_t b = 4, s = 256;
  auto model = ValueOrDie(BuildDecoder(c));
  ParameterArena params = ValueOrDie(ParameterArena::Create(*model, DType::kF32, Device::Cpu()));
  Generator gen(1);
  CCTUNE_CHECK_OK(params.InitializeRandom(gen));
  ParameterArena grads = ValueOrDie(
      ParameterArena::Allocate(params.layout().WithDType(DType::kF32), Device::Cpu()));
  DecoderTrainerOptions opts;
  opts.activation_checkpointing = checkpointing;
  auto trainer = ValueOrDie(DecoderTrainer::Create(model.get(), &grads, opts));
  auto opt = ValueOrDie(AdamW::Create(ValueOrDie(ArenaParamBuffers(params, grads)), {}));
  std::vector<int64_t> tokens(b * s), labels(b * s);
  for (int64_t i = 0; i < b * s; ++i) {
    tokens[i] = static_cast<int64_t>(gen.UniformInt(c.vocab_size));
    labels[i] = static_cast<int64_t>(gen.UniformInt(c.vocab_size));
  }
  MicroBatch mb;
  mb.tokens = ValueOrDie(Tensor::FromVector(tokens, {b, s}));
  mb.labels = ValueOrDie(Tensor::FromVector(labels, {b, s}));
  for (auto _ : state) {
    benchmark::DoNotOptimize(ValueOrDie(TrainStep(*trainer, *opt, {mb}, 1.0)));
  }
  const double n_params = static_cast<double>(params.NumParameters());
  const double flops_per_token = 6.0 * n_params + 12.0 * c.num_layers * s * c.embed_dim;
  state.counters["params_M"] = n_params / 1e6;
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(b * s) * state.iterations(),
                         benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(
      flops_per_token * b * s * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

BENCHMARK(BM_TrainStep)->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace cctune
