#include "recipes/full_finetune_single_device.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "checkpoint/atomic_file.h"
#include "checkpoint/hf.h"
#include "config/validate.h"
#include "core/device.h"
#include "core/device_interface.h"
#include "core/random.h"
#include "core/status.h"
#include "data/collate.h"
#include "data/data_loader.h"
#include "data/dataset_components.h"
#include "generation/model_loader.h"
#include "modules/decoder_backward.h"
#include "modules/parameters.h"
#include "recipes/builtin_configs.h"
#include "recipes/config_checks.h"
#include "recipes/finetune_utils.h"
#include "recipes/checkpointer_components.h"
#include "recipes/model_components.h"
#include "recipes/tokenizer_components.h"
#include "recipes/training_components.h"
#include "training/metric_logger_components.h"
#include "training/progress_bar.h"
#include "training/recipe_state.h"
#include "training/train_step.h"

namespace cctune {

namespace {

namespace fs = std::filesystem;

constexpr char kLatestFile[] = "LATEST";
constexpr char kRecipeStateFile[] = "recipe_state.safetensors";

Schema BuildSchema() {
  return Schema("full_finetune_single_device",
                "full fine-tune on one device (recipes/full_finetune_single_device)")
      .Required("output_dir", KeyType::String(), "checkpoints (step_<N>/, LATEST) and logs")
      .Optional("shared_dir", KeyType::String(), "a base folder other keys refer to")
      .Required("model", KeyType::Component("model"), "model builder (cctune.models.*)")
      .Required("tokenizer", KeyType::Component("tokenizer"), "tokenizer")
      .Default("checkpointer", KeyType::Component("checkpointer").OrNull(), ConfigNode::Null(),
               "initial weights (HF or llama2.c); null: random init from seed")
      .Required("dataset", KeyType::Component("dataset"), "training dataset")
      .Default("validation_dataset", KeyType::Component("dataset").OrNull(), ConfigNode::Null(),
               "held-out dataset for the validation loss (null: none)")
      .Default("eval_every_n_steps", KeyType::Int(), ConfigNode::Int(0),
               "validation loss every N steps (0: only at epoch ends when configured)")
      .Default("seed", KeyType::Int(), ConfigNode::Int(0), "init, shuffling and RNG seed")
      .Default("shuffle", KeyType::Bool(), ConfigNode::Bool(true), "shuffle every epoch")
      .Default("batch_size", KeyType::Int(), ConfigNode::Int(2), "samples per micro-batch")
      .Check("batch_size", AtLeastOne)
      .Default("epochs", KeyType::Int(), ConfigNode::Int(1), "passes over the dataset")
      .Check("epochs", AtLeastOne)
      .Default("max_steps_per_epoch", KeyType::Int().OrNull(), ConfigNode::Null(),
               "cap on optimizer steps per epoch (null: the whole epoch)")
      .Check("max_steps_per_epoch", AtLeastOne)
      .Default("gradient_accumulation_steps", KeyType::Int(), ConfigNode::Int(1),
               "micro-batches per optimizer step")
      .Check("gradient_accumulation_steps", AtLeastOne)
      .Default("clip_grad_norm", KeyType::Float().OrNull(), ConfigNode::Null(),
               "global L2 norm clipping (null: none; the norm is still logged)")
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
      .Default("optimizer_in_bwd", KeyType::Bool(), ConfigNode::Bool(false), "must be false")
      .Default("dtype", KeyType::Enum({"fp32", "bf16"}), ConfigNode::String("fp32"),
               "parameter dtype (bf16 keeps f32 master copies in the optimizer)")
      .Default("device", KeyType::String(), ConfigNode::String("cpu"),
               "cpu, cuda or cuda:N (weights, gradients and optimizer state on it)")
      .Check("device", TrainingDeviceName)
      .Default("metric_logger", KeyType::Component("metric_logger").OrNull(), ConfigNode::Null(),
               "where metrics go (null: stdout)")
      .Default("log_every_n_steps", KeyType::Int(), ConfigNode::Int(1), "log period in steps")
      .Check("log_every_n_steps", AtLeastOne)
      .Default("log_peak_memory_stats", KeyType::Bool(), ConfigNode::Bool(true),
               "log peak_memory_gb")
      .Default("save_every_n_steps", KeyType::Int().OrNull(), ConfigNode::Null(),
               "checkpoint period in steps (null: epoch ends only)")
      .Check("save_every_n_steps", AtLeastOne)
      .Default("resume_from_checkpoint", KeyType::Bool(), ConfigNode::Bool(false),
               "continue from <output_dir>/LATEST bit-identically")
      .Default("stop_after_steps", KeyType::Int().OrNull(), ConfigNode::Null(),
               "end the run (with a checkpoint) after this many steps in total, as a "
               "preemption would; the schedule is unchanged (null: run to the end)")
      .Check("stop_after_steps", AtLeastOne);
}

struct Run {
  std::unique_ptr<TransformerDecoder> model;
  ParameterArena params;
  ParameterArena grads;
  std::unique_ptr<DecoderTrainer> trainer;
  std::unique_ptr<Optimizer> optimizer;
  std::optional<CosineScheduleWithWarmup> schedule;
  double base_lr = 0;
  HfModelConfig hf_config;
  DType dtype = DType::kF32;
};

// Writes <output_dir>/step_<step>/ then points LATEST at it; removes older step_ dirs.
absl::Status SaveCheckpoint(const std::string& output_dir, const Run& run, RecipeState state) {
  const std::string name = absl::StrCat("step_", state.proto.step());
  const std::string dir = absl::StrCat(output_dir, "/", name);
  HfSaveOptions save_options;
  CCTUNE_RETURN_IF_ERROR(
      SaveHfCheckpoint(dir, run.params.ExportStateDict(), run.hf_config, save_options));
  SetOptimizerState(run.optimizer->ExportState(), &state);
  CCTUNE_RETURN_IF_ERROR(SaveRecipeState(absl::StrCat(dir, "/", kRecipeStateFile), state));
  CCTUNE_RETURN_IF_ERROR(
      WriteFileAtomically(absl::StrCat(output_dir, "/", kLatestFile), name + "\n"));
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(output_dir, ec)) {
    const std::string other = entry.path().filename().string();
    if (entry.is_directory() && absl::StartsWith(other, "step_") && other != name) {
      fs::remove_all(entry.path(), ec);
    }
  }
  std::fprintf(stderr, "Saved checkpoint %s\n", dir.c_str());
  return absl::OkStatus();
}

}  // namespace

const Schema& FullFinetuneRecipeSchema() {
  static const Schema* const schema = new Schema(BuildSchema());
  return *schema;
}

absl::Status RegisterFullFinetuneComponents() {
  CCTUNE_RETURN_IF_ERROR(RegisterModelComponents());
  CCTUNE_RETURN_IF_ERROR(RegisterCheckpointers());
  CCTUNE_RETURN_IF_ERROR(RegisterTokenizers());
  CCTUNE_RETURN_IF_ERROR(RegisterDatasets());
  CCTUNE_RETURN_IF_ERROR(RegisterMetricLoggers());
  CCTUNE_RETURN_IF_ERROR(RegisterTrainingComponents());
  return absl::OkStatus();
}

std::vector<ConfigError> ValidateFullFinetuneConfig(const Config& config) {
  CCTUNE_CHECK_OK(RegisterFullFinetuneComponents());
  std::vector<ConfigError> errors = Validate(config, FullFinetuneRecipeSchema());
  Config resolved = config;
  if (!resolved.resolved()) resolved.ResolveCollectingErrors();
  if (const ConfigNode* ck = resolved.Find("checkpointer"); ck != nullptr && ck->IsMap()) {
    CheckCheckpointFilesExist(*ck, &errors);
  }
  for (const char* key : {"dataset", "validation_dataset"}) {
    for (ConfigError& e : MissingDatasetFiles(resolved.root(), key)) errors.push_back(e);
  }
  return errors;
}

absl::Status RunFullFinetuneRecipe(const Config& config) {
  CCTUNE_RETURN_IF_ERROR(RegisterFullFinetuneComponents());
  const ConfigNode root = WithDefaults(config.root(), FullFinetuneRecipeSchema());
  CCTUNE_ASSIGN_OR_RETURN(std::string device_name, root.GetString("device"));
  CCTUNE_ASSIGN_OR_RETURN(const Device device, TrainingDevice(device_name));

  CCTUNE_ASSIGN_OR_RETURN(std::string output_dir, root.GetString("output_dir"));
  CCTUNE_ASSIGN_OR_RETURN(std::string dtype_name, root.GetString("dtype"));
  Run run;
  CCTUNE_ASSIGN_OR_RETURN(run.dtype, RecipeDType(dtype_name));
  CCTUNE_ASSIGN_OR_RETURN(int64_t seed, root.GetInt("seed"));
  CCTUNE_ASSIGN_OR_RETURN(bool shuffle, root.GetBool("shuffle"));
  CCTUNE_ASSIGN_OR_RETURN(int64_t batch_size, root.GetInt("batch_size"));
  CCTUNE_ASSIGN_OR_RETURN(int64_t epochs, root.GetInt("epochs"));
  CCTUNE_ASSIGN_OR_RETURN(std::optional<int64_t> max_steps_per_epoch,
                          root.GetOptionalInt("max_steps_per_epoch"));
  CCTUNE_ASSIGN_OR_RETURN(int64_t accum, root.GetInt("gradient_accumulation_steps"));
  CCTUNE_ASSIGN_OR_RETURN(std::optional<double> clip, root.GetOptionalFloat("clip_grad_norm"));
  CCTUNE_ASSIGN_OR_RETURN(bool act_ckpt, root.GetBool("enable_activation_checkpointing"));
  CCTUNE_ASSIGN_OR_RETURN(int64_t log_every, root.GetInt("log_every_n_steps"));
  CCTUNE_ASSIGN_OR_RETURN(bool log_memory, root.GetBool("log_peak_memory_stats"));
  CCTUNE_ASSIGN_OR_RETURN(std::optional<int64_t> save_every,
                          root.GetOptionalInt("save_every_n_steps"));
  CCTUNE_ASSIGN_OR_RETURN(int64_t eval_every, root.GetInt("eval_every_n_steps"));
  CCTUNE_ASSIGN_OR_RETURN(bool resume, root.GetBool("resume_from_checkpoint"));
  CCTUNE_ASSIGN_OR_RETURN(std::optional<int64_t> stop_after,
                          root.GetOptionalInt("stop_after_steps"));
  CCTUNE_ASSIGN_OR_RETURN(bool opt_in_bwd, root.GetBool("optimizer_in_bwd"));
  if (opt_in_bwd) return absl::UnimplementedError("optimizer_in_bwd: true is not supported");

  // Tokenizer, initial weights, model.
  CCTUNE_ASSIGN_OR_RETURN(TokenizerComponent tok,
                          TokenizerRegistry().InstantiateKey(root, "tokenizer"));
  Generator gen(static_cast<uint64_t>(seed));
  const ConfigNode* ck_node = root.Find("checkpointer");
  if (ck_node != nullptr && !ck_node->IsNull()) {
    CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<Checkpointer> checkpointer,
                            CheckpointerRegistry().Instantiate(*ck_node));
    CCTUNE_ASSIGN_OR_RETURN(LoadedCheckpoint ckpt, checkpointer->LoadCheckpoint());
    CCTUNE_ASSIGN_OR_RETURN(run.model, ModelComponentRegistry().InstantiateKey(
                                           root, "model", ckpt.model_args));
    CCTUNE_ASSIGN_OR_RETURN(run.params,
                            LoadWeights(*run.model, ckpt.state_dict, run.dtype, device));
  } else {
    CCTUNE_ASSIGN_OR_RETURN(run.model,
                            ModelComponentRegistry().InstantiateKey(root, "model", ModelArgs()));
    CCTUNE_ASSIGN_OR_RETURN(run.params, ParameterArena::Create(*run.model, run.dtype, device));
    CCTUNE_RETURN_IF_ERROR(run.params.InitializeRandom(gen));
  }
  if (tok.tokenizer->vocab_size() > run.model->vocab_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the tokenizer has ", tok.tokenizer->vocab_size(), " tokens but the model only ",
        run.model->vocab_size(), ": set model.vocab_size"));
  }
  run.hf_config = ModelHfConfig(*run.model, run.params, run.dtype);
  CCTUNE_ASSIGN_OR_RETURN(
      run.grads, ParameterArena::Allocate(run.params.layout().WithDType(DType::kF32), device));
  DecoderTrainerOptions trainer_options;
  trainer_options.activation_checkpointing = act_ckpt;
  CCTUNE_ASSIGN_OR_RETURN(run.trainer,
                          DecoderTrainer::Create(run.model.get(), &run.grads, trainer_options));
  CCTUNE_ASSIGN_OR_RETURN(std::vector<ParamBuffer> buffers,
                          ArenaParamBuffers(run.params, run.grads));
  CCTUNE_ASSIGN_OR_RETURN(run.optimizer,
                          OptimizerRegistry().InstantiateKey(root, "optimizer", buffers));
  run.base_lr = run.optimizer->lr();
  if (const ConfigNode* loss = root.Find("loss"); loss != nullptr && !loss->IsNull()) {
    CCTUNE_RETURN_IF_ERROR(LossRegistry().Instantiate(*loss).status());
  }

  // Data.
  DatasetContext ctx;
  ctx.tokenizer = tok.tokenizer.get();
  ctx.prompt_format = tok.prompt_format;
  ctx.max_seq_len = tok.max_seq_len.value_or(0);
  CCTUNE_ASSIGN_OR_RETURN(std::shared_ptr<const Dataset> dataset,
                          DatasetRegistry().InstantiateKey(root, "dataset", ctx));
  DataLoaderOptions lo;
  lo.batch_size = batch_size;
  lo.shuffle = shuffle;
  lo.seed = static_cast<uint64_t>(seed);
  lo.collate.pad_id = 0;
  CCTUNE_ASSIGN_OR_RETURN(DataLoader loader, DataLoader::Create(dataset, lo));
  std::optional<DataLoader> val_loader;
  if (const ConfigNode* v = root.Find("validation_dataset"); v != nullptr && !v->IsNull()) {
    CCTUNE_ASSIGN_OR_RETURN(std::shared_ptr<const Dataset> val,
                            DatasetRegistry().Instantiate(*v, ctx));
    DataLoaderOptions vo = lo;
    vo.shuffle = false;
    vo.drop_last = false;
    CCTUNE_ASSIGN_OR_RETURN(DataLoader vl, DataLoader::Create(val, vo));
    val_loader.emplace(std::move(vl));
  }
  int64_t steps_per_epoch = loader.batches_per_epoch() / accum;
  if (max_steps_per_epoch.has_value() && *max_steps_per_epoch < steps_per_epoch) {
    steps_per_epoch = *max_steps_per_epoch;
  }
  if (steps_per_epoch < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dataset '", dataset->source(), "' has ", loader.batches_per_epoch(),
        " batches of batch_size ", batch_size, ": fewer than gradient_accumulation_steps (",
        accum, ")"));
  }
  const int64_t total_steps = steps_per_epoch * epochs;
  if (const ConfigNode* s = root.Find("lr_scheduler"); s != nullptr && !s->IsNull()) {
    CCTUNE_ASSIGN_OR_RETURN(CosineScheduleWithWarmup sched,
                            LrSchedulerRegistry().Instantiate(*s, total_steps));
    run.schedule.emplace(sched);
  }

  // Resume.
  int64_t step = 0;
  int64_t tokens_seen = 0;
  std::string last_checkpoint = "(none)";
  if (resume) {
    const std::string latest_path = absl::StrCat(output_dir, "/", kLatestFile);
    if (!fs::exists(latest_path)) {
      return absl::NotFoundError(absl::StrCat(
          "resume_from_checkpoint: true, but ", latest_path,
          " does not exist (no checkpoint was saved in output_dir ", output_dir, ")"));
    }
    CCTUNE_ASSIGN_OR_RETURN(std::string latest, ReadFileToString(latest_path));
    latest = std::string(absl::StripAsciiWhitespace(latest));
    const std::string dir = absl::StrCat(output_dir, "/", latest);
    HfLoadOptions load_options;
    load_options.alias_tied_output = false;
    CCTUNE_ASSIGN_OR_RETURN(HfCheckpoint hf, LoadHfCheckpoint(dir, load_options));
    CCTUNE_RETURN_IF_ERROR(run.params.LoadStateDict(hf.state_dict).status());
    CCTUNE_ASSIGN_OR_RETURN(RecipeState state,
                            LoadRecipeState(absl::StrCat(dir, "/", kRecipeStateFile)));
    if (state.proto.seed() != static_cast<uint64_t>(seed)) {
      return absl::InvalidArgumentError(absl::StrCat("resume: ", dir, " was trained with seed ",
                                                     state.proto.seed(), ", config has ", seed));
    }
    CCTUNE_ASSIGN_OR_RETURN(OptimizerState os, GetOptimizerState(state));
    CCTUNE_RETURN_IF_ERROR(run.optimizer->ImportState(os));
    CCTUNE_RETURN_IF_ERROR(RestoreDataLoaderPosition(state.proto.data(), dir, &loader));
    RestoreRngState(state.proto.rng(), &gen);
    step = state.proto.step();
    tokens_seen = state.proto.tokens_seen();
    last_checkpoint = dir;
    std::fprintf(stderr, "Resumed from %s at step %lld\n", dir.c_str(),
                 static_cast<long long>(step));
  }

  std::unique_ptr<MetricLogger> logger;
  if (const ConfigNode* m = root.Find("metric_logger"); m != nullptr && !m->IsNull()) {
    CCTUNE_ASSIGN_OR_RETURN(logger, MetricLoggerRegistry().Instantiate(*m));
  } else {
    logger = std::make_unique<StdoutLogger>();
  }
  std::fprintf(stderr,
               "Model has %lld parameters (%s); %lld samples, %lld steps per epoch, %lld epochs\n",
               static_cast<long long>(run.params.NumParameters()), dtype_name.c_str(),
               static_cast<long long>(dataset->size()), static_cast<long long>(steps_per_epoch),
               static_cast<long long>(epochs));

  auto make_state = [&](int64_t epoch) {
    RecipeState state;
    state.proto.set_step(step);
    state.proto.set_epoch(epoch);
    state.proto.set_seed(static_cast<uint64_t>(seed));
    *state.proto.mutable_rng() = RngStateToProto(gen);
    *state.proto.mutable_data() = DataLoaderPositionToProto(loader);
    state.proto.set_tokens_seen(tokens_seen);
    return state;
  };
  auto save = [&](int64_t epoch) -> absl::Status {
    CCTUNE_RETURN_IF_ERROR(SaveCheckpoint(output_dir, run, make_state(epoch)));
    last_checkpoint = absl::StrCat(output_dir, "/step_", step);
    return absl::OkStatus();
  };

  ResetPeakMemory(device);
  const double clip_norm = clip.value_or(0.0);
  // On a terminal only (stderr redirected to a file stays clean).
  ProgressBar progress("train", total_steps);
  progress.Update(step);
  progress.ResetClock();
  // The loader's position (epoch, batch) is the truth; a finished epoch (by max_steps) moves on.
  while (loader.position().epoch < epochs) {
    const int64_t epoch = loader.position().epoch;
    if (loader.position().batch_index / accum >= steps_per_epoch || loader.EpochDone()) {
      CCTUNE_RETURN_IF_ERROR(loader.StartEpoch(epoch + 1));
      continue;
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<MicroBatch> micro;
    int64_t step_tokens = 0;
    for (int64_t a = 0; a < accum; ++a) {
      CCTUNE_ASSIGN_OR_RETURN(Batch batch, loader.Next());
      step_tokens += batch.num_tokens;
      CCTUNE_ASSIGN_OR_RETURN(MicroBatch mb, ToMicroBatch(batch));
      micro.push_back(std::move(mb));
    }
    const double lr =
        run.schedule.has_value() ? run.schedule->Lr(run.base_lr, run.optimizer->step()) : run.base_lr;
    run.optimizer->set_lr(lr);
    absl::StatusOr<TrainStepResult> r = TrainStep(*run.trainer, *run.optimizer, micro, clip_norm);
    if (!r.ok()) {
      return absl::Status(r.status().code(),
                          absl::StrCat("training stopped at step ", step + 1, " (epoch ", epoch,
                                       "): ", r.status().message(),
                                       "; the last good checkpoint is ", last_checkpoint));
    }
    if (!std::isfinite(r->loss)) {
      return absl::FailedPreconditionError(
          absl::StrCat("training stopped at step ", step + 1, ": non-finite loss ", r->loss,
                       "; the last good checkpoint is ", last_checkpoint));
    }
    ++step;
    tokens_seen += step_tokens;
    progress.Update(step, absl::StrFormat("loss=%.4f", r->loss));
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const bool epoch_end = loader.position().batch_index / accum >= steps_per_epoch ||
                           loader.batches_per_epoch() - loader.position().batch_index < accum;
    if (step % log_every == 0) {
      Metrics m = {{"loss", r->loss},
                   {"lr", lr},
                   {"grad_norm", r->grad_norm},
                   {"tokens_per_second", seconds > 0 ? step_tokens / seconds : 0.0},
                   {"epoch", static_cast<double>(epoch)}};
      if (log_memory) {
        m.push_back({"peak_memory_gb", GetMemoryStats(device).peak_bytes / 1e9});
      }
      CCTUNE_RETURN_IF_ERROR(logger->LogDict(m, step));
    }
    if (val_loader.has_value() &&
        ((eval_every > 0 && step % eval_every == 0) || (eval_every == 0 && epoch_end))) {
      CCTUNE_ASSIGN_OR_RETURN(double vloss, ValidationLoss(*run.trainer, *val_loader));
      CCTUNE_RETURN_IF_ERROR(logger->LogDict({{"val_loss", vloss}}, step));
    }
    const bool stop = stop_after.has_value() && step >= *stop_after;
    if (epoch_end) CCTUNE_RETURN_IF_ERROR(loader.StartEpoch(epoch + 1));
    if (epoch_end || stop || (save_every.has_value() && step % *save_every == 0)) {
      CCTUNE_RETURN_IF_ERROR(save(loader.position().epoch));
    }
    if (stop) {
      std::fprintf(stderr, "Stopping after %lld steps (stop_after_steps)\n",
                   static_cast<long long>(step));
      break;
    }
  }
  progress.Close();
  CCTUNE_RETURN_IF_ERROR(logger->Close());
  return absl::OkStatus();
}

int FullFinetuneMain(const std::vector<std::string>& args) {
  const char* const prog = "full_finetune_single_device";
  std::string config_arg;
  std::vector<std::string> overrides;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      std::fprintf(stdout, "usage: %s --config <path or built-in name> [key=value ...]\n\n%s",
                   prog, FullFinetuneRecipeSchema().Describe().c_str());
      return 0;
    }
    if (a == "--config") {
      if (i + 1 >= args.size()) {
        std::fprintf(stderr, "%s: --config needs a value\n", prog);
        return 2;
      }
      config_arg = args[++i];
    } else if (absl::StartsWith(a, "--config=")) {
      config_arg = a.substr(9);
    } else {
      overrides.push_back(a);
    }
  }
  if (config_arg.empty()) {
    std::fprintf(stderr, "usage: %s --config <path or built-in name> [key=value ...]\n", prog);
    return 2;
  }
  absl::Status registered = RegisterFullFinetuneComponents();
  if (!registered.ok()) {
    std::fprintf(stderr, "%s: %s\n", prog, registered.ToString().c_str());
    return 1;
  }
  absl::StatusOr<Config> config = LoadUnresolvedRecipeConfig(config_arg, overrides);
  if (!config.ok()) {
    std::fprintf(stderr, "%s: %s\n", prog, std::string(config.status().message()).c_str());
    return 1;
  }
  const std::vector<ConfigError> errors = ValidateFullFinetuneConfig(*config);
  if (!errors.empty()) {
    std::fprintf(stderr, "%s: %s\n", prog, std::string(ErrorsToStatus(errors).message()).c_str());
    return 1;
  }
  absl::Status resolved = config->Resolve();
  if (!resolved.ok()) {
    std::fprintf(stderr, "%s: %s\n", prog, std::string(resolved.message()).c_str());
    return 1;
  }
  std::fprintf(stderr, "Running %s with resolved config:\n\n%s\n", prog,
               config->ToYaml().c_str());
  absl::Status st = RunFullFinetuneRecipe(*config);
  if (!st.ok()) {
    std::fprintf(stderr, "%s: %s\n", prog, std::string(st.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace cctune
