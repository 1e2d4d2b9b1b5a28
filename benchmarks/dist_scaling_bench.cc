// Data-parallel scaling of full_finetune_distributed's step (benchmarks/dist_scaling.sh runs
// it at 1 and 2 ranks and prints the efficiency): each rank trains the model with its own
// batch (weak scaling: the per-rank batch is fixed), sharded per layer as the recipe does
// (distributed/fsdp.h LayerShardedArena: all-gathers before each layer's forward and backward,
// the next one prefetched, reduce-scatters after its backward; DataParallelHooks for the
// token counts, losses and norms). The group is wrapped in a TimedProcessGroup, so the time
// the training thread is blocked in collectives (the exposed, non-overlapped communication)
// is measured beside the step time.
//
//   bazel build //benchmarks:dist_scaling_bench
//   bazel-bin/benchmarks/dist_scaling_bench --model demo              # one rank
//   BIN=bazel-bin/benchmarks/dist_scaling_bench
//   mpirun -np 2 --bind-to none -x OMP_NUM_THREADS=1 $BIN --model 15m   # two
//
// Models: the shapes of benchmarks/train_bench.cc (--model 15m: a 15.7M Llama, 6 layers, d 384,
// vocab 8192, batch 4 x 256 per rank; --model demo: configs/demo's 0.8M model, batch 64 x 16
// per rank), fp32 AdamW. Flags: --steps N (timed, 5), --warmup N (1), --reshard 0|1
// (fsdp_reshard_after_forward, 1). Rank 0 prints per-rank figures and a last line
// "RESULT ranks=N model=M tokens_per_s=... step_ms=... exposed_comm_ms=... exposed_comm_pct=...
// thread_cpu_ms=... process_cpu_ms=..." (tokens/s over all ranks from the slowest rank's time;
// the exposed share is the largest rank's; CPU time per step of the training thread and of the
// whole process, MPI's worker thread included, the largest rank's: on a machine whose cores
// other work shares, the CPU times tell the cost of the communication from the wait for a
// core).
#include <sys/resource.h>
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/random.h"
#include "core/status.h"
#include "distributed/fsdp.h"
#include "distributed/process_group.h"
#include "distributed/timed_process_group.h"
#include "benchmarks/bench_models.h"
#include "models/decoder_builder.h"
#include "modules/parameters.h"
#include "training/decoder_trainer.h"
#include "training/optim.h"
#include "training/train_step.h"

namespace cctune {
namespace {

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

double ProcessCpuSeconds() {
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + 1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

absl::Status Run(int argc, char** argv) {
  int steps = 5, warmup = 1, reshard = 1;
  std::string model_name = "15m";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--steps") {
      steps = std::atoi(value.c_str());
    } else if (flag == "--warmup") {
      warmup = std::atoi(value.c_str());
    } else if (flag == "--reshard") {
      reshard = std::atoi(value.c_str());
    } else if (flag == "--model" && (value == "15m" || value == "demo")) {
      model_name = value;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "dist_scaling_bench: unknown flag or value ", flag, " ", value,
          " (--steps N --warmup N --reshard 0|1 --model 15m|demo)"));
    }
  }
  if (steps < 1) return absl::InvalidArgumentError("dist_scaling_bench: --steps must be >= 1");
  CCTUNE_ASSIGN_OR_RETURN(const DistributedEnv env, ReadDistributedEnv());
  CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroup> group,
                          CreateProcessGroup(env, ProcessGroupOptions(), Device::Cpu()));
  TimedProcessGroup pg(group.get());
  const int n = pg.world_size();

  const BenchModel shape = BenchModelShape(model_name);
  const DecoderConfig& c = shape.config;
  const int64_t b = shape.batch, s = shape.seq;
  CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<TransformerDecoder> model, BuildDecoder(c));
  CCTUNE_ASSIGN_OR_RETURN(ParameterArena params,
                          ParameterArena::Create(*model, DType::kF32, Device::Cpu()));
  Generator init(1);  // the same weights on every rank
  CCTUNE_RETURN_IF_ERROR(params.InitializeRandom(init));
  // As full_finetune_distributed: buffers padded to N, gradients f32 alike, per-layer units.
  CCTUNE_RETURN_IF_ERROR(PadArenaForSharding(*model, n, params));
  CCTUNE_ASSIGN_OR_RETURN(
      ParameterArena grads,
      ParameterArena::Allocate(params.layout().WithDType(DType::kF32).PadBuffersTo(n),
                               Device::Cpu()));
  CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<DecoderTrainer> trainer,
                          DecoderTrainer::Create(model.get(), &grads));
  CCTUNE_ASSIGN_OR_RETURN(
      std::unique_ptr<LayerShardedArena> sharded,
      LayerShardedArena::Create(&pg, params, grads, static_cast<int>(model->num_layers()),
                                /*tied_output=*/false, reshard != 0));
  LayerShardedArena* l = sharded.get();
  model->set_parameter_hook([l](int stage, bool backward) { return l->BeforeStage(stage, backward); });
  trainer->set_gradient_ready_hook([l](int stage) { return l->GradientsReady(stage); });
  AdamWOptions ao;
  ao.lr = 1e-3;
  ao.weight_decay = 0.01;
  CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<AdamW> opt, AdamW::Create(l->OptimizerBuffers(), ao));
  DataParallelHooks hooks;
  hooks.sum_over_ranks = [&pg](double v) { return AllReduceScalar(pg, v, ReduceOp::kSum); };
  hooks.reduce_gradients = [l](const std::vector<Tensor>&) { return l->FinishGradients(); };
  hooks.sharded_gradients = true;
  hooks.after_update = [l] { return l->ReleaseAll(); };

  Generator gen(100 + pg.rank());  // each rank its own batch
  std::vector<int64_t> tokens(b * s), labels(b * s);
  for (int64_t i = 0; i < b * s; ++i) {
    tokens[i] = static_cast<int64_t>(gen.UniformInt(c.vocab_size));
    labels[i] = static_cast<int64_t>(gen.UniformInt(c.vocab_size));
  }
  MicroBatch mb;
  CCTUNE_ASSIGN_OR_RETURN(mb.tokens, Tensor::FromVector(tokens, {b, s}));
  CCTUNE_ASSIGN_OR_RETURN(mb.labels, Tensor::FromVector(labels, {b, s}));

  for (int i = 0; i < warmup; ++i) {
    CCTUNE_RETURN_IF_ERROR(TrainStep(*trainer, *opt, {mb}, 1.0, nullptr, &hooks).status());
  }
  CCTUNE_RETURN_IF_ERROR(pg.Barrier());
  pg.Reset();
  double loss = 0;
  const double thread_cpu0 = ThreadCpuSeconds(), process_cpu0 = ProcessCpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) {
    CCTUNE_ASSIGN_OR_RETURN(const TrainStepResult r,
                            TrainStep(*trainer, *opt, {mb}, 1.0, nullptr, &hooks));
    loss = r.loss;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double thread_cpu = ThreadCpuSeconds() - thread_cpu0;
  const double process_cpu = ProcessCpuSeconds() - process_cpu0;
  const double blocked = pg.blocked_seconds();
  const int64_t collectives = pg.collectives();
  // Gathering the figures is not timed.
  CCTUNE_ASSIGN_OR_RETURN(const double slowest, AllReduceScalar(pg, secs, ReduceOp::kMax));
  CCTUNE_ASSIGN_OR_RETURN(const double most_blocked,
                          AllReduceScalar(pg, blocked / secs, ReduceOp::kMax));
  CCTUNE_ASSIGN_OR_RETURN(const double most_cpu,
                          AllReduceScalar(pg, process_cpu / steps, ReduceOp::kMax));
  CCTUNE_ASSIGN_OR_RETURN(const double most_thread_cpu,
                          AllReduceScalar(pg, thread_cpu / steps, ReduceOp::kMax));
  const double step_ms = 1e3 * secs / steps;
  std::fprintf(stderr,
               "rank %d of %d: %.1f ms/step, blocked in collectives %.1f ms/step (%.1f%%, %lld "
               "collectives/step); CPU time per step: training thread %.1f ms, process %.1f ms\n",
               pg.rank(), n, step_ms, 1e3 * blocked / steps, 100.0 * blocked / secs,
               static_cast<long long>(collectives / steps), 1e3 * thread_cpu / steps,
               1e3 * process_cpu / steps);
  if (pg.rank() == 0) {
    const double tokens_per_s = static_cast<double>(b * s) * n * steps / slowest;
    std::printf("dist_scaling_bench: model %s (%.2fM params), %d rank%s x batch %lld x seq %lld, "
                "reshard_after_forward %d, %d warmup + %d timed steps, last loss %.4f\n",
                model_name.c_str(), params.NumParameters() / 1e6, n, n == 1 ? "" : "s",
                static_cast<long long>(b), static_cast<long long>(s), reshard, warmup, steps, loss);
    std::printf("RESULT ranks=%d model=%s tokens_per_s=%.1f step_ms=%.1f exposed_comm_ms=%.2f "
                "exposed_comm_pct=%.2f thread_cpu_ms=%.1f process_cpu_ms=%.1f\n",
                n, model_name.c_str(), tokens_per_s, 1e3 * slowest / steps,
                1e3 * most_blocked * slowest / steps, 100.0 * most_blocked,
                1e3 * most_thread_cpu, 1e3 * most_cpu);
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace cctune

int main(int argc, char** argv) {
  const absl::Status s = cctune::Run(argc, argv);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
