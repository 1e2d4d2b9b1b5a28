#include "recipes/finetune_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <filesystem>
#include <random>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint/atomic_file.h"
#include "core/device_interface.h"
#include "core/log.h"
#include "core/status.h"
#include "data/dataset_components.h"
#include "distributed/fsdp.h"
#include "recipes/config_checks.h"
#include "recipes/finetune_utils.h"
#include "training/interrupt.h"
#include "training/metric_logger_components.h"
#include "training/progress_bar.h"
#include "training/trace_profiler.h"
#include "training/train_step.h"
#include "training/training_components.h"

namespace cctune {

namespace fs = std::filesystem;

Schema FinetuneRecipeSchema(const std::string& name, const std::string& doc,
                            const std::string& output_dir_doc, const std::string& model_doc,
                            const std::string& checkpointer_doc) {
  return Schema(name, doc)
      .Required("output_dir", KeyType::String(), output_dir_doc)
      .Optional("shared_dir", KeyType::String(), "a base folder other keys refer to")
      .Required("model", KeyType::Component("model"), model_doc)
      .Required("tokenizer", KeyType::Component("tokenizer"), "tokenizer")
      .Default("checkpointer", KeyType::Component("checkpointer").OrNull(), ConfigNode::Null(),
               checkpointer_doc)
      .Required("dataset", KeyType::Component("dataset"), "training dataset")
      .Default("validation_dataset", KeyType::Component("dataset").OrNull(), ConfigNode::Null(),
               "held-out dataset for the validation loss (null: none)")
      .Default("eval_every_n_steps", KeyType::Int().InRange(0, kMaxStepsKey), ConfigNode::Int(0),
               "validation loss every N steps (0: only at epoch ends when configured)")
      .Optional("dataset_val", KeyType::Component("dataset").OrNull(),
                "torchtune's name for validation_dataset")
      .Optional("run_val_every_n_steps", KeyType::Int().InRange(1, kMaxStepsKey).OrNull(),
                "torchtune's name for eval_every_n_steps (null: the epoch ends)")
      .Check("run_val_every_n_steps", AtLeastOne)
      .Optional("batch_size_val", KeyType::Int().InRange(1, kMaxBatchSizeKey).OrNull(),
                "samples per validation batch (null: batch_size)")
      .Check("batch_size_val", AtLeastOne)
      .Default("seed", KeyType::Int().OrNull(), ConfigNode::Int(0),
               "init, shuffling and RNG seed (null: a random one, logged and saved in the "
               "recipe state; a resume reuses the saved seed)")
      .Default("profiler", KeyType::Object(TraceProfilerSchema()).OrNull(), ConfigNode::Null(),
               "torchtune.training.setup_torch_profiler: with enabled: true, a Chrome trace "
               "(<output_dir>/trace.json) of the scheduled steps' data, forward, backward and "
               "optimizer times (null: none)")
      .Default("log_level", KeyType::String(), ConfigNode::String("INFO"),
               "the recipe's messages on stderr: DEBUG (adds per-step timings), INFO, WARNING "
               "(hides the progress bar and the INFO lines) or ERROR; any case")
      .Check("log_level", LogLevelKey)
      .Default("shuffle", KeyType::Bool(), ConfigNode::Bool(true), "shuffle every epoch")
      .Default("batch_size", KeyType::Int().InRange(1, kMaxBatchSizeKey), ConfigNode::Int(2),
               "samples per micro-batch")
      .Check("batch_size", AtLeastOne)
      .Default("epochs", KeyType::Int().InRange(1, kMaxEpochsKey), ConfigNode::Int(1),
               "passes over the dataset")
      .Check("epochs", AtLeastOne)
      .Default("max_steps_per_epoch", KeyType::Int().InRange(1, kMaxStepsKey).OrNull(),
               ConfigNode::Null(),
               "cap on optimizer steps per epoch (null: the whole epoch)")
      .Check("max_steps_per_epoch", AtLeastOne)
      .Default("gradient_accumulation_steps", KeyType::Int().InRange(1, kMaxBatchSizeKey),
               ConfigNode::Int(1),
               "micro-batches per optimizer step")
      .Check("gradient_accumulation_steps", AtLeastOne)
      .Default("clip_grad_norm", KeyType::Float().GreaterThan(0).OrNull(), ConfigNode::Null(),
               "global L2 norm clipping, > 0 (null: none; the norm is still logged)")
      .Required("optimizer", KeyType::Component("optimizer"), "torch.optim.AdamW / SGD")
      .Default("lr_scheduler", KeyType::Component("lr_scheduler").OrNull(), ConfigNode::Null(),
               "learning-rate schedule (null: constant)")
      .Default("loss", KeyType::Component("loss").OrNull(), ConfigNode::Null(),
               "torchtune.modules.loss.CEWithChunkedOutputLoss (the only loss)")
      .Default("enable_activation_checkpointing", KeyType::Bool(), ConfigNode::Bool(false),
               "recompute each layer's forward in the backward")
      .Default("enable_activation_offloading", KeyType::Bool(), ConfigNode::Bool(false),
               "accepted for torchtune configs; ignored (activations stay on the device)")
      .Default("compile", KeyType::Bool(), ConfigNode::Bool(false), "accepted; ignored")
      .Default("optimizer_in_bwd", KeyType::Bool(), ConfigNode::Bool(false),
               "update each parameter as soon as its gradient is complete in the backward "
               "(no full gradient arena); not with clip_grad_norm or "
               "gradient_accumulation_steps > 1")
      .Default("dtype", KeyType::Enum({"fp32", "bf16"}), ConfigNode::String("fp32"),
               "parameter dtype (bf16 keeps f32 master copies in the optimizer)")
      .Default("device", KeyType::String(), ConfigNode::String("cpu"),
               "cpu, cuda or cuda:N (weights, gradients and optimizer state on it)")
      .Check("device", TrainingDeviceName)
      .Default("metric_logger", KeyType::Component("metric_logger").OrNull(), ConfigNode::Null(),
               "where metrics go (null: stdout)")
      .Default("log_every_n_steps", KeyType::Int().InRange(1, kMaxStepsKey), ConfigNode::Int(1),
               "log period in steps")
      .Check("log_every_n_steps", AtLeastOne)
      .Default("log_peak_memory_stats", KeyType::Bool(), ConfigNode::Bool(true),
               "log peak_memory_gb")
      .Default("save_every_n_steps", KeyType::Int().InRange(1, kMaxStepsKey).OrNull(),
               ConfigNode::Null(),
               "checkpoint period in steps (null: epoch ends only)")
      .Check("save_every_n_steps", AtLeastOne)
      .Default("resume_from_checkpoint", KeyType::Bool(), ConfigNode::Bool(false),
               "continue from <output_dir>/LATEST bit-identically")
      .Default("stop_after_steps", KeyType::Int().InRange(1, kMaxStepsKey).OrNull(),
               ConfigNode::Null(),
               "end the run (with a checkpoint) after this many steps in total, as a "
               "preemption would; the schedule is unchanged (null: run to the end)")
      .Check("stop_after_steps", AtLeastOne);
}

std::vector<ConfigError> ConflictingValidationKeys(const ConfigNode& given) {
  std::vector<ConfigError> errors;
  for (const auto& [ours, theirs] : kValidationKeyAliases) {
    const ConfigNode* a = given.Find(ours);
    const ConfigNode* b = given.Find(theirs);
    if (a == nullptr || b == nullptr || a->ToYaml() == b->ToYaml()) continue;
    errors.push_back(b->MakeError(absl::StrCat(
        "'", theirs, "' (torchtune's spelling) and '", ours,
        "' are the same setting but differ: ", b->Describe(), " vs ", a->Describe(),
        "; give one of them")));
    errors.back().key = theirs;
  }
  return errors;
}

const ConfigNode* ValidationDatasetNode(const ConfigNode& root) {
  for (const char* key : {"validation_dataset", "dataset_val"}) {
    if (const ConfigNode* v = root.Find(key); v != nullptr && !v->IsNull()) return v;
  }
  return nullptr;
}

absl::StatusOr<int64_t> ChooseSeed(const std::string& output_dir, bool resume) {
  if (resume) {
    CCTUNE_ASSIGN_OR_RETURN(const std::string dir, LatestCheckpointDir(output_dir));
    CCTUNE_ASSIGN_OR_RETURN(RecipeState state,
                            LoadRecipeState(absl::StrCat(dir, "/", kRecipeStateFile)));
    if (state.proto.seed() > static_cast<uint64_t>(INT64_MAX)) {
      return absl::InvalidArgumentError(absl::StrCat("resume: ", dir, " holds seed ",
                                                     state.proto.seed(), ", out of range"));
    }
    return static_cast<int64_t>(state.proto.seed());
  }
  // 31 bits: a seed anyone can pass back as `seed=N` on any platform.
  return static_cast<int64_t>(std::random_device{}() & 0x7fffffffu);
}

absl::StatusOr<FinetuneSettings> ReadFinetuneSettings(const ConfigNode& root) {
  FinetuneSettings s;
  CCTUNE_ASSIGN_OR_RETURN(std::string log_level, root.GetString("log_level"));
  CCTUNE_ASSIGN_OR_RETURN(s.log_level, ParseLogLevel(log_level));
  SetLogLevel(s.log_level);
  CCTUNE_ASSIGN_OR_RETURN(std::string device_name, root.GetString("device"));
  CCTUNE_ASSIGN_OR_RETURN(s.device, TrainingDevice(device_name));
  CCTUNE_ASSIGN_OR_RETURN(s.output_dir, root.GetString("output_dir"));
  CCTUNE_ASSIGN_OR_RETURN(s.dtype_name, root.GetString("dtype"));
  CCTUNE_ASSIGN_OR_RETURN(s.dtype, RecipeDType(s.dtype_name));
  CCTUNE_ASSIGN_OR_RETURN(std::optional<int64_t> seed, root.GetOptionalInt("seed"));
  CCTUNE_ASSIGN_OR_RETURN(s.shuffle, root.GetBool("shuffle"));
  CCTUNE_ASSIGN_OR_RETURN(s.batch_size, root.GetInt("batch_size"));
  CCTUNE_ASSIGN_OR_RETURN(s.epochs, root.GetInt("epochs"));
  CCTUNE_ASSIGN_OR_RETURN(s.max_steps_per_epoch, root.GetOptionalInt("max_steps_per_epoch"));
  CCTUNE_ASSIGN_OR_RETURN(s.accum, root.GetInt("gradient_accumulation_steps"));
  CCTUNE_ASSIGN_OR_RETURN(s.clip_grad_norm, root.GetOptionalFloat("clip_grad_norm"));
  CCTUNE_ASSIGN_OR_RETURN(s.activation_checkpointing,
                          root.GetBool("enable_activation_checkpointing"));
  CCTUNE_ASSIGN_OR_RETURN(s.log_every, root.GetInt("log_every_n_steps"));
  CCTUNE_ASSIGN_OR_RETURN(s.log_memory, root.GetBool("log_peak_memory_stats"));
  CCTUNE_ASSIGN_OR_RETURN(s.save_every, root.GetOptionalInt("save_every_n_steps"));
  CCTUNE_ASSIGN_OR_RETURN(s.eval_every, root.GetInt("eval_every_n_steps"));
  CCTUNE_ASSIGN_OR_RETURN(std::optional<int64_t> run_val, root.GetOptionalInt("run_val_every_n_steps"));
  if (run_val.has_value()) s.eval_every = *run_val;
  CCTUNE_ASSIGN_OR_RETURN(s.batch_size_val, root.GetOptionalInt("batch_size_val"));
  CCTUNE_ASSIGN_OR_RETURN(s.profiler, ReadTraceProfilerOptions(root.Find("profiler"), s.output_dir));
  CCTUNE_ASSIGN_OR_RETURN(s.resume, root.GetBool("resume_from_checkpoint"));
  CCTUNE_ASSIGN_OR_RETURN(s.stop_after, root.GetOptionalInt("stop_after_steps"));
  if (const ConfigNode* ck = root.Find("checkpointer"); ck != nullptr && ck->IsMap()) {
    CCTUNE_ASSIGN_OR_RETURN(s.keep_last_n, ck->GetOptionalInt("keep_last_n_checkpoints"));
  }
  if (seed.has_value()) {
    s.seed = *seed;
  } else {
    CCTUNE_ASSIGN_OR_RETURN(s.seed, ChooseSeed(s.output_dir, s.resume));
    LogInfo("Using seed %lld", static_cast<long long>(s.seed));
  }
  CCTUNE_ASSIGN_OR_RETURN(s.optimizer_in_bwd, root.GetBool("optimizer_in_bwd"));
  // torchtune's checks and messages (full_finetune_single_device.py).
  if (s.optimizer_in_bwd && s.clip_grad_norm.has_value()) {
    return absl::InvalidArgumentError(
        "Gradient clipping is not supported with optimizer in bwd. Please set "
        "clip_grad_norm=None, or optimizer_in_bwd=False.");
  }
  if (s.optimizer_in_bwd && s.accum > 1) {
    return absl::InvalidArgumentError(
        "Gradient accumulation is not supported with optimizer in bwd. Please set "
        "gradient_accumulation_steps=1, or optimizer_in_bwd=False.");
  }
  return s;
}

absl::StatusOr<FinetuneData> MakeFinetuneData(const ConfigNode& root, const TokenizerComponent& tok,
                                              const FinetuneSettings& s, int64_t num_replicas,
                                              int64_t rank) {
  FinetuneData data;
  DatasetContext ctx;
  ctx.tokenizer = tok.tokenizer.get();
  ctx.prompt_format = tok.prompt_format;
  ctx.max_seq_len = tok.max_seq_len.value_or(0);
  ctx.truncate_left = tok.truncate_left;
  CCTUNE_ASSIGN_OR_RETURN(data.dataset, DatasetRegistry().InstantiateKey(root, "dataset", ctx));
  DataLoaderOptions lo;
  lo.batch_size = s.batch_size;
  lo.shuffle = s.shuffle;
  lo.seed = static_cast<uint64_t>(s.seed);
  lo.collate.pad_id = 0;
  lo.num_replicas = num_replicas;
  lo.rank = rank;
  CCTUNE_ASSIGN_OR_RETURN(DataLoader loader, DataLoader::Create(data.dataset, lo));
  data.loader.emplace(std::move(loader));
  if (const ConfigNode* v = ValidationDatasetNode(root); v != nullptr) {
    CCTUNE_ASSIGN_OR_RETURN(std::shared_ptr<const Dataset> val,
                            DatasetRegistry().Instantiate(*v, ctx));
    DataLoaderOptions vo = lo;
    vo.batch_size = s.batch_size_val.value_or(s.batch_size);
    vo.shuffle = false;
    vo.drop_last = false;
    vo.num_replicas = 1;
    vo.rank = 0;
    CCTUNE_ASSIGN_OR_RETURN(DataLoader vl, DataLoader::Create(val, vo));
    data.val_loader.emplace(std::move(vl));
  }
  const int64_t batches = data.loader->batches_per_epoch();
  data.steps_per_epoch = batches / s.accum;
  if (s.max_steps_per_epoch.has_value() && *s.max_steps_per_epoch < data.steps_per_epoch) {
    data.steps_per_epoch = *s.max_steps_per_epoch;
  }
  if (data.steps_per_epoch < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dataset '", data.dataset->source(), "' has ", batches, " batches of batch_size ",
        s.batch_size, num_replicas > 1 ? absl::StrCat(" per rank (", num_replicas, " ranks)") : "",
        ": fewer than gradient_accumulation_steps (", s.accum, ")"));
  }
  if (const ConfigNode* sc = root.Find("lr_scheduler"); sc != nullptr && !sc->IsNull()) {
    CCTUNE_ASSIGN_OR_RETURN(
        CosineScheduleWithWarmup sched,
        LrSchedulerRegistry().Instantiate(*sc, data.steps_per_epoch * s.epochs));
    data.schedule.emplace(sched);
  }
  return data;
}

TrainingLoop MakeTrainingLoop(const FinetuneSettings& s, const FinetuneData& data) {
  TrainingLoop loop;
  loop.device = s.device;
  loop.epochs = s.epochs;
  loop.steps_per_epoch = data.steps_per_epoch;
  loop.accum = s.accum;
  loop.clip_norm = s.clip_grad_norm.value_or(0.0);
  loop.log_every = s.log_every;
  loop.log_memory = s.log_memory;
  loop.eval_every = s.eval_every;
  loop.save_every = s.save_every;
  loop.stop_after = s.stop_after;
  loop.output_dir = s.output_dir;
  return loop;
}

absl::Status ImportOptimizerState(const RecipeState& state, Optimizer& optimizer) {
  CCTUNE_ASSIGN_OR_RETURN(OptimizerState os, GetOptimizerState(state));
  return optimizer.ImportState(os);
}

absl::StatusOr<RunProgress> RestoreRecipeState(
    const std::string& dir, int64_t seed,
    const std::function<absl::Status(const RecipeState&)>& restore_optimizer, DataLoader& loader,
    Generator& gen) {
  CCTUNE_ASSIGN_OR_RETURN(RecipeState state,
                          LoadRecipeState(absl::StrCat(dir, "/", kRecipeStateFile)));
  if (state.proto.seed() != static_cast<uint64_t>(seed)) {
    return absl::InvalidArgumentError(absl::StrCat("resume: ", dir, " was trained with seed ",
                                                   state.proto.seed(), ", config has ", seed));
  }
  CCTUNE_RETURN_IF_ERROR(restore_optimizer(state));
  CCTUNE_RETURN_IF_ERROR(RestoreDataLoaderPosition(state.proto.data(), dir, &loader));
  RestoreRngState(state.proto.rng(), &gen);
  RunProgress progress;
  progress.step = state.proto.step();
  progress.tokens_seen = state.proto.tokens_seen();
  progress.last_checkpoint = dir;
  LogInfo("Resumed from %s at step %lld", dir.c_str(),
               static_cast<long long>(progress.step));
  return progress;
}

RecipeState MakeRecipeState(const RunProgress& progress, int64_t epoch, int64_t seed,
                            const Generator& gen, const DataLoader& loader) {
  RecipeState state;
  state.proto.set_step(progress.step);
  state.proto.set_epoch(epoch);
  state.proto.set_seed(static_cast<uint64_t>(seed));
  *state.proto.mutable_rng() = RngStateToProto(gen);
  *state.proto.mutable_data() = DataLoaderPositionToProto(loader);
  state.proto.set_tokens_seen(progress.tokens_seen);
  return state;
}

absl::StatusOr<std::vector<std::string>> PruneCheckpoints(const std::string& output_dir,
                                                          const std::string& latest,
                                                          int64_t keep_last_n) {
  std::vector<std::pair<int64_t, fs::path>> older;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(output_dir, ec)) {
    const std::string other = entry.path().filename().string();
    int64_t n = 0;
    if (other == latest || !absl::StartsWith(other, "step_") || entry.is_symlink() ||
        !absl::SimpleAtoi(other.substr(5), &n) || !IsCompleteCheckpoint(entry.path().string())) {
      continue;
    }
    older.emplace_back(n, entry.path());
  }
  std::sort(older.begin(), older.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> removed;
  const size_t keep_older = static_cast<size_t>(std::max<int64_t>(keep_last_n - 1, 0));
  for (size_t i = keep_older; i < older.size(); ++i) {
    fs::remove_all(older[i].second, ec);
    if (ec) {
      return absl::InternalError(absl::StrCat("keep_last_n_checkpoints: cannot remove ",
                                              older[i].second.string(), ": ", ec.message()));
    }
    removed.push_back(older[i].second.string());
  }
  return removed;
}

absl::Status FinishCheckpoint(const std::string& output_dir, const std::string& name,
                              const RecipeState& state, std::optional<int64_t> keep_last_n) {
  const std::string dir = absl::StrCat(output_dir, "/", name);
  CCTUNE_RETURN_IF_ERROR(SaveRecipeState(absl::StrCat(dir, "/", kRecipeStateFile), state));
  CCTUNE_RETURN_IF_ERROR(
      WriteFileAtomically(absl::StrCat(output_dir, "/", kLatestFile), name + "\n"));
  LogInfo("Saved checkpoint %s", dir.c_str());
  if (keep_last_n.has_value()) {
    CCTUNE_ASSIGN_OR_RETURN(const std::vector<std::string> removed,
                            PruneCheckpoints(output_dir, name, *keep_last_n));
    for (const std::string& path : removed) LogDebug("Removed old checkpoint %s", path.c_str());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<MetricLogger>> MakeMetricLogger(const ConfigNode& root) {
  if (const ConfigNode* m = root.Find("metric_logger"); m != nullptr && !m->IsNull()) {
    return MetricLoggerRegistry().Instantiate(*m);
  }
  return std::unique_ptr<MetricLogger>(std::make_unique<StdoutLogger>());
}

namespace {

// Peak resident set of this process in bytes since the last ResetPeakRss (Linux VmHWM), -1
// when it cannot be read. What sharded weights save shows here: the allocator's figure counts
// the whole arenas, whose foreign pages are handed back (distributed/fsdp.h).
int64_t PeakRssBytes() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return -1;
  char line[256];
  int64_t kb = -1;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::sscanf(line, "VmHWM: %ld kB", &kb) == 1) break;
  }
  std::fclose(f);
  return kb < 0 ? -1 : kb * 1024;
}

void ResetPeakRss() {
  if (std::FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
    std::fputs("5", f);  // resets VmHWM to the current RSS
    std::fclose(f);
  }
}

}  // namespace

absl::Status RunTrainingLoop(const TrainingLoop& loop, RunProgress& progress) {
  DataLoader& loader = *loop.loader;
  int64_t& step = progress.step;
  const int64_t accum = loop.accum;
  ProcessGroup* const group = loop.group;
  const bool writer = group == nullptr || group->rank() == 0;
  // What failed or killed saves left takes the space the next save needs (a full disk).
  if (writer) {
    CCTUNE_ASSIGN_OR_RETURN(const std::vector<std::string> removed,
                            RemoveCheckpointLeftovers(loop.output_dir));
    for (const std::string& path : removed) {
      LogWarning("Removed %s (left by a save that did not finish)", path.c_str());
    }
  }
  // A value of this rank over every rank (itself without a group).
  auto over_ranks = [group](double v, ReduceOp op) -> absl::StatusOr<double> {
    if (group == nullptr) return v;
    return AllReduceScalar(*group, v, op);
  };
  const InterruptHandler interrupt;
  int64_t saved_step = step;  // the step of the newest checkpoint (or of the resumed one)
  auto save = [&]() -> absl::Status {
    const std::string name = CheckpointName(step);
    absl::StatusOr<std::string> dir = loop.save(loader.position().epoch);
    if (!dir.ok()) {
      // Keep only the last good checkpoint: a partial step_N would hold the space a later
      // save (or a resumed run) needs.
      const absl::Status cleaned =
          writer ? RemoveFailedCheckpoint(loop.output_dir, name) : absl::OkStatus();
      return absl::Status(
          dir.status().code(),
          absl::StrCat("saving checkpoint ", loop.output_dir, "/", name, " at step ", step,
                       " failed: ", dir.status().message(), "; the last good checkpoint is ",
                       progress.last_checkpoint, " (LATEST still names it)",
                       cleaned.ok() ? "" : absl::StrCat("; ", cleaned.message())));
    }
    progress.last_checkpoint = *dir;
    saved_step = step;
    return absl::OkStatus();
  };
  ResetPeakMemory(loop.device);
  if (group != nullptr && loop.device.is_cpu()) ResetPeakRss();
  const auto loop_start = std::chrono::steady_clock::now();
  int64_t trained_here = 0;  // steps this run has trained (the profiler's schedule counts them)
  // On a terminal only (stderr redirected to a file stays clean), and at log_level INFO or
  // below.
  ProgressBar bar("train", loop.steps_per_epoch * loop.epochs,
                  writer && LogEnabled(LogLevel::kInfo) ? stderr : nullptr);
  bar.Update(step);
  bar.ResetClock();
  // The loader's position (epoch, batch) is the truth; a finished epoch (by max_steps) moves on.
  while (loader.position().epoch < loop.epochs) {
    const int64_t epoch = loader.position().epoch;
    if (loader.position().batch_index / accum >= loop.steps_per_epoch || loader.EpochDone()) {
      CCTUNE_RETURN_IF_ERROR(loader.StartEpoch(epoch + 1));
      continue;
    }
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t run_index = trained_here++;
    std::vector<MicroBatch> micro;
    int64_t step_tokens = 0;
    for (int64_t a = 0; a < accum; ++a) {
      CCTUNE_ASSIGN_OR_RETURN(Batch batch, loader.Next());
      step_tokens += batch.num_tokens;
      CCTUNE_ASSIGN_OR_RETURN(MicroBatch mb, ToMicroBatch(batch));
      micro.push_back(std::move(mb));
    }
    const double data_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double lr = loop.schedule != nullptr
                          ? loop.schedule->Lr(loop.base_lr, loop.optimizer->step())
                          : loop.base_lr;
    loop.optimizer->set_lr(lr);
    absl::StatusOr<TrainStepResult> r =
        TrainStep(*loop.trainer, *loop.optimizer, micro, loop.clip_norm, loop.after_backward,
                  loop.data_parallel);
    if (!r.ok()) {
      return absl::Status(r.status().code(),
                          absl::StrCat("training stopped at step ", step + 1, " (epoch ", epoch,
                                       "): ", r.status().message(),
                                       "; the last good checkpoint is ", progress.last_checkpoint));
    }
    if (!std::isfinite(r->loss)) {
      return absl::FailedPreconditionError(
          absl::StrCat("training stopped at step ", step + 1, ": non-finite loss ", r->loss,
                       "; the last good checkpoint is ", progress.last_checkpoint));
    }
    ++step;
    if (group != nullptr) {
      CCTUNE_ASSIGN_OR_RETURN(const double total, over_ranks(step_tokens, ReduceOp::kSum));
      step_tokens = static_cast<int64_t>(total);
    }
    progress.tokens_seen += step_tokens;
    if (loop.profiler != nullptr && loop.profiler->Recording(run_index)) {
      loop.profiler->AddStep(
          step, std::chrono::duration<double>(t0 - loop_start).count(),
          {{"data", data_seconds}, {"forward", r->forward_seconds},
           {"backward", r->backward_seconds}, {"optimizer", r->optimizer_seconds}});
      CCTUNE_ASSIGN_OR_RETURN(const std::string trace, loop.profiler->Write());
      LogDebug("Profiled step %lld into %s", static_cast<long long>(step), trace.c_str());
    }
    bar.Update(step, absl::StrFormat("loss=%.4f", r->loss));
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    LogDebug("step %lld: %lld tokens, loss %.6f, grad_norm %.6f, lr %.6g, %.6f s",
             static_cast<long long>(step), static_cast<long long>(step_tokens), r->loss,
             r->grad_norm, lr, seconds);
    const bool epoch_end = loader.position().batch_index / accum >= loop.steps_per_epoch ||
                           loader.batches_per_epoch() - loader.position().batch_index < accum;
    if (step % loop.log_every == 0) {
      Metrics m = {{"loss", r->loss},
                   {"lr", lr},
                   {"grad_norm", r->grad_norm},
                   {"tokens_per_second", seconds > 0 ? step_tokens / seconds : 0.0},
                   {"epoch", static_cast<double>(epoch)}};
      if (loop.log_memory) {
        CCTUNE_ASSIGN_OR_RETURN(
            const double peak,
            over_ranks(static_cast<double>(GetMemoryStats(loop.device).peak_bytes), ReduceOp::kMax));
        m.push_back({"peak_memory_gb", peak / 1e9});
        if (group != nullptr && loop.device.is_cpu()) {
          CCTUNE_ASSIGN_OR_RETURN(
              const double rss,
              over_ranks(static_cast<double>(PeakRssBytes()), ReduceOp::kMax));
          m.push_back({"peak_rss_gb", rss / 1e9});
        }
      }
      if (writer) CCTUNE_RETURN_IF_ERROR(loop.logger->LogDict(m, step));
    }
    // Every rank validates (sharded weights are gathered layer by layer); rank 0 logs.
    if (loop.val_loader != nullptr &&
        ((loop.eval_every > 0 && step % loop.eval_every == 0) ||
         (loop.eval_every == 0 && epoch_end))) {
      CCTUNE_ASSIGN_OR_RETURN(double vloss, ValidationLoss(*loop.trainer, *loop.val_loader));
      if (writer) CCTUNE_RETURN_IF_ERROR(loop.logger->LogDict({{"val_loss", vloss}}, step));
    }
    const bool stop = loop.stop_after.has_value() && step >= *loop.stop_after;
    if (epoch_end) CCTUNE_RETURN_IF_ERROR(loader.StartEpoch(epoch + 1));
    if (epoch_end || stop || (loop.save_every.has_value() && step % *loop.save_every == 0)) {
      CCTUNE_RETURN_IF_ERROR(save());
    }
    // A step boundary: a signal that came during this step (its data, validation or save)
    // stops here, with the checkpoint a periodic save would write.
    int sig = interrupt.signal();
    if (group != nullptr) {
      CCTUNE_ASSIGN_OR_RETURN(const double any, over_ranks(sig, ReduceOp::kMax));
      sig = static_cast<int>(any);
    }
    if (sig != 0) {
      if (saved_step != step) CCTUNE_RETURN_IF_ERROR(save());
      bar.Close();
      CCTUNE_RETURN_IF_ERROR(loop.logger->Close());
      return InterruptedError(
          sig, absl::StrCat(SignalName(sig), ": stopped after step ", step, " with checkpoint ",
                            progress.last_checkpoint,
                            " (LATEST); rerun with resume_from_checkpoint=true to continue"));
    }
    if (stop) {
      LogInfo("Stopping after %lld steps (stop_after_steps)",
                   static_cast<long long>(step));
      break;
    }
  }
  bar.Close();
  return loop.logger->Close();
}

}  // namespace cctune
