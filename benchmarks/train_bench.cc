// Training throughput, side by side with PyTorch eager (tools/golden/bench_train_pytorch.py
// builds the same model; tools/bench_train_vs_pytorch.sh runs both and prints the ratio).
//
// A ~15.7M-parameter Llama: 6 layers, d 384, 6 query / 2 KV heads (head_dim 64), SwiGLU 1024,
// vocab 8192, untied output, RoPE base 10000; batch 4 × seq 256, random tokens and labels.
// Each step is TrainStep: forward, chunked cross-entropy, backward, clip to norm 1, AdamW
// (lr 1e-3, betas 0.9/0.999, eps 1e-8, weight decay 0.01), fp32 on the CPU.
//
//   bazel run -c opt //benchmarks:train_bench -- --steps 5 --warmup 1 --threads 2
// --model demo trains the demo model's shape instead (configs/demo: 4 layers, d 128, 8/2 heads,
// SwiGLU 384, vocab 264; batch 64 x 16); --dtype bf16 keeps bf16 weights (f32 gradients and
// AdamW master copies).
//
// Prints tokens/s and achieved GFLOP/s. FLOPs per token: 6 · N_matmul (every parameter that
// multiplies activations: all but the embedding table, which is a lookup; norms are counted
// too, they are negligible) plus the attention's 12 · layers · s · d (QKᵀ and PV, forward
// 2 · 2 · s · d and backward twice that, the causal mask counted in full as llm.c does).
// Then the step profile of the timed steps (kernels/cpu/op_profile.h): each category's
// ms/step, share of the step, and GFLOP/s (as % of the FMA peak measured at start,
// benchmarks/cpu_peak.h) or GB/s; "outside ops" is the step time that no op accounts for
// (tensor allocation and copies, the trainer's own code). Then the peak RSS of the process
// and each timed step's loss in full ("losses: ...", to tell whether a change altered the
// training's bits). The last line is machine-readable: "RESULT tokens_per_s=... gflops=...
// step_ms=... peak_rss_mib=... pct_of_peak=...". --gemm_ab N then times N more steps on each
// of the training GEMMs' routes (OpenBLAS, packed), alternating, as a same-run ratio.
#include <omp.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "benchmarks/cpu_peak.h"
#include "core/random.h"
#include "core/status.h"
#include "kernels/cpu/gemm/gemm.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/op_profile.h"
#include "benchmarks/bench_models.h"
#include "models/decoder_builder.h"
#include "modules/parameters.h"
#include "training/decoder_trainer.h"
#include "training/optim.h"
#include "training/train_step.h"

namespace cctune {
namespace {

int Main(int argc, char** argv) {
  int steps = 5, warmup = 1, threads = 0, gemm_ab = 0;
  std::string model_name = "15m", dtype_name = "f32";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int value = std::atoi(argv[i + 1]);
    if (flag == "--steps") {
      steps = value;
    } else if (flag == "--warmup") {
      warmup = value;
    } else if (flag == "--threads") {
      threads = value;
    } else if (flag == "--gemm_ab") {
      gemm_ab = value;
    } else if (flag == "--model" && (argv[i + 1] == std::string("15m") ||
                                     argv[i + 1] == std::string("demo"))) {
      model_name = argv[i + 1];
    } else if (flag == "--dtype" && (argv[i + 1] == std::string("f32") ||
                                     argv[i + 1] == std::string("bf16"))) {
      dtype_name = argv[i + 1];
    } else {
      std::fprintf(stderr,
                   "train_bench: unknown flag or value %s %s (--steps N --warmup N --threads N "
                   "--gemm_ab N --model 15m|demo --dtype f32|bf16)\n",
                   flag.c_str(), argv[i + 1]);
      return 2;
    }
  }
  if (threads > 0) omp_set_num_threads(threads);
  const BenchModel shape = BenchModelShape(model_name);
  const DecoderConfig& c = shape.config;
  const int64_t b = shape.batch, s = shape.seq;
  // bf16: bf16 weights (the GEMMs read them as stored), f32 gradients, AdamW's f32 masters.
  const DType param_dtype = dtype_name == "bf16" ? DType::kBF16 : DType::kF32;
  auto model = ValueOrDie(BuildDecoder(c));
  ParameterArena params = ValueOrDie(ParameterArena::Create(*model, param_dtype, Device::Cpu()));
  Generator gen(1);
  CCTUNE_CHECK_OK(params.InitializeRandom(gen));
  ParameterArena grads = ValueOrDie(
      ParameterArena::Allocate(params.layout().WithDType(DType::kF32), Device::Cpu()));
  auto trainer = ValueOrDie(DecoderTrainer::Create(model.get(), &grads));
  AdamWOptions ao;
  ao.lr = 1e-3;
  ao.weight_decay = 0.01;
  auto opt = ValueOrDie(AdamW::Create(ValueOrDie(ArenaParamBuffers(params, grads)), ao));
  std::vector<int64_t> tokens(b * s), labels(b * s);
  for (int64_t i = 0; i < b * s; ++i) {
    tokens[i] = static_cast<int64_t>(gen.UniformInt(c.vocab_size));
    labels[i] = static_cast<int64_t>(gen.UniformInt(c.vocab_size));
  }
  MicroBatch mb;
  mb.tokens = ValueOrDie(Tensor::FromVector(tokens, {b, s}));
  mb.labels = ValueOrDie(Tensor::FromVector(labels, {b, s}));

  const double n_params = static_cast<double>(params.NumParameters());
  const double n_matmul = n_params - static_cast<double>(c.vocab_size * c.embed_dim);
  const double flops_per_token = 6.0 * n_matmul + 12.0 * c.num_layers * s * c.embed_dim;
  std::printf("cctune train_bench: model %s, %s weights, %.2fM params (%.2fM in matmuls), batch "
              "%lld x seq %lld, %d threads, %d warmup + %d timed steps\n",
              model_name.c_str(), dtype_name.c_str(), n_params / 1e6, n_matmul / 1e6,
              static_cast<long long>(b),
              static_cast<long long>(s), omp_get_max_threads(), warmup, steps);
  const bench::FmaPeak peak = bench::MeasureFmaPeak(omp_get_max_threads());
  std::printf("ISA %s; FP32 FMA peak: %s\n", cpu::IsaLevelName(cpu::ActiveIsaLevel()),
              peak.Describe().c_str());
  if (param_dtype == DType::kBF16 && cpu::gemm_internal::Bf16DotRouteEnabled()) {
    // %peak stays against the f32 FMA peak (the yardstick); the bf16 GEMMs' own is 2x.
    std::printf("bf16 GEMMs: vdpbf16ps at the FMA's instruction rate on this CPU (Zen 4/5), "
                "4 flops per lane: their peak is 2 x %.1f = %.1f GFLOP/s\n",
                peak.gflops, 2 * peak.gflops);
  }
  const char* blas_core = std::getenv("OPENBLAS_CORETYPE");
  if (blas_core != nullptr && *blas_core != '\0') {
    std::printf("note: OPENBLAS_CORETYPE=%s is set: OpenBLAS runs those kernels, not the ones it "
                "would pick for this CPU (f32 GEMMs)\n", blas_core);
  }
  for (int i = 0; i < warmup; ++i) ValueOrDie(TrainStep(*trainer, *opt, {mb}, 1.0));
  cpu::ResetOpProfile();
  cpu::SetOpProfiling(true);
  double forward_s = 0, backward_s = 0, optimizer_s = 0;
  const auto t0 = std::chrono::steady_clock::now();
  double loss = 0;
  std::vector<double> losses;  // printed after the timing, in full (to compare runs bitwise)
  for (int i = 0; i < steps; ++i) {
    const TrainStepResult r = ValueOrDie(TrainStep(*trainer, *opt, {mb}, 1.0));
    loss = r.loss;
    losses.push_back(r.loss);
    forward_s += r.forward_seconds;
    backward_s += r.backward_seconds;
    optimizer_s += r.optimizer_seconds;
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  cpu::SetOpProfiling(false);
  const cpu::OpProfile prof = cpu::OpProfileSnapshot();
  const double tokens_per_s = static_cast<double>(b * s) * steps / secs;
  const double step_ms = 1e3 * secs / steps;
  const double gflops = tokens_per_s * flops_per_token / 1e9;
  std::printf("last loss %.4f, %.1f ms/step\n", loss, step_ms);
  std::printf("phases (ms/step): decoder forward %.1f, output+loss+backward %.1f, optimizer "
              "%.1f, other %.1f\n",
              1e3 * forward_s / steps, 1e3 * backward_s / steps, 1e3 * optimizer_s / steps,
              step_ms - 1e3 * (forward_s + backward_s + optimizer_s) / steps);
  std::printf("%-32s %9s %7s %10s %8s %9s %7s\n", "step profile", "ms/step", "%step", "GFLOP/s",
              "%peak", "GB/s", "calls");
  double accounted = 0, gemm_s = 0, gemm_flops = 0;
  for (int c = 0; c < cpu::kNumOpCategories; ++c) {
    const cpu::OpStats& st = prof[c];
    accounted += st.seconds;
    if (c <= static_cast<int>(cpu::OpCategory::kGemmBackwardDw)) {
      gemm_s += st.seconds;
      gemm_flops += st.flops;
    }
    const double ms = 1e3 * st.seconds / steps;
    std::printf("%-32s %9.1f %6.1f%%", cpu::OpCategoryName(static_cast<cpu::OpCategory>(c)), ms,
                100.0 * ms / step_ms);
    if (st.flops > 0 && st.seconds > 0) {
      const double rate = st.flops / st.seconds / 1e9;
      std::printf(" %10.1f %7.1f%%", rate, 100.0 * rate / peak.gflops);
    } else {
      std::printf(" %10s %8s", "-", "-");
    }
    if (st.bytes > 0 && st.seconds > 0) {
      std::printf(" %9.1f", st.bytes / st.seconds / 1e9);
    } else {
      std::printf(" %9s", "-");
    }
    std::printf(" %7lld\n", static_cast<long long>(st.calls / steps));
  }
  const double outside_ms = step_ms - 1e3 * accounted / steps;
  std::printf("%-32s %9.1f %6.1f%%\n", "outside ops (alloc, copies)", outside_ms,
              100.0 * outside_ms / step_ms);
  std::printf("%-32s %9.1f %6.1f%% %10.1f %7.1f%%\n", "all GEMMs", 1e3 * gemm_s / steps,
              100.0 * gemm_s / secs, gemm_flops / gemm_s / 1e9,
              100.0 * gemm_flops / gemm_s / 1e9 / peak.gflops);
  std::printf("%-32s %9.1f %6.1f%% %10.1f %7.1f%%\n", "whole step (model FLOPs)", step_ms, 100.0,
              gflops, 100.0 * gflops / peak.gflops);
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  const double rss_mib = static_cast<double>(ru.ru_maxrss) / 1024.0;  // Linux: KiB
  std::printf("peak RSS %.1f MiB\n", rss_mib);
  std::printf("losses:");
  for (double l : losses) std::printf(" %.17g", l);
  std::printf("\n");
  if (gemm_ab > 0) {
    // The training GEMMs' two routes, step by step in turn (both see the same machine load).
    using cpu::gemm_internal::SgemmPath;
    const SgemmPath routes[2] = {SgemmPath::kBlas, SgemmPath::kPacked};
    double route_s[2] = {0, 0};
    for (int i = 0; i < 2 * gemm_ab; ++i) {
      const SgemmPath before = cpu::gemm_internal::SetLargeGemmRoute(routes[i % 2]);
      const auto ts = std::chrono::steady_clock::now();
      ValueOrDie(TrainStep(*trainer, *opt, {mb}, 1.0));
      route_s[i % 2] += std::chrono::duration<double>(std::chrono::steady_clock::now() - ts).count();
      cpu::gemm_internal::SetLargeGemmRoute(before);
    }
    std::printf("gemm A/B, %d alternating steps each: blas %.1f ms/step, packed %.1f ms/step, "
                "packed/blas time %.3f\n",
                gemm_ab, 1e3 * route_s[0] / gemm_ab, 1e3 * route_s[1] / gemm_ab,
                route_s[1] / route_s[0]);
  }
  std::printf("RESULT tokens_per_s=%.1f gflops=%.1f step_ms=%.1f peak_rss_mib=%.1f "
              "pct_of_peak=%.1f\n",
              tokens_per_s, gflops, step_ms, rss_mib, 100.0 * gflops / peak.gflops);
  return 0;
}

}  // namespace
}  // namespace cctune

int main(int argc, char** argv) { return cctune::Main(argc, argv); }
