// The pieces of the fine-tune skeleton (recipes/finetune_recipe.h) that do not depend on what
// is trained: the schema and settings, the data, restoring the recipe state of the latest
// checkpoint, the metric logger, and the epoch/step loop with its logging, validation,
// checkpoint periods, preemption and non-finite stop.
#ifndef CCTUNE_RECIPES_FINETUNE_LOOP_H_
#define CCTUNE_RECIPES_FINETUNE_LOOP_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "config/config.h"
#include "config/node.h"
#include "config/schema.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/log.h"
#include "core/random.h"
#include "data/data_loader.h"
#include "data/dataset.h"
#include "distributed/process_group.h"
#include "recipes/checkpoint_dir.h"
#include "tokenizers/tokenizer_components.h"
#include "training/decoder_trainer.h"
#include "training/lr_scheduler.h"
#include "training/metric_logger.h"
#include "training/optim.h"
#include "training/recipe_state.h"
#include "training/trace_profiler.h"
#include "training/train_step.h"

namespace cctune {

// The schema of a fine-tune recipe's config: torchtune's top-level keys, shared by
// full_finetune_single_device and lora_finetune_single_device; the recipes differ only in the
// documentation of output_dir, model and checkpointer.
Schema FinetuneRecipeSchema(const std::string& name, const std::string& doc,
                            const std::string& output_dir_doc, const std::string& model_doc,
                            const std::string& checkpointer_doc);

// The fine-tune recipes' plain settings (everything but the components), read from a root
// that has the schema's defaults applied.
struct FinetuneSettings {
  Device device;  // checked usable (TrainingDevice)
  LogLevel log_level = LogLevel::kInfo;  // set process-wide by ReadFinetuneSettings
  std::string output_dir;
  std::string dtype_name;  // as configured: fp32 / bf16
  DType dtype = DType::kF32;
  int64_t seed = 0;
  bool shuffle = true;
  int64_t batch_size = 1;
  int64_t epochs = 1;
  std::optional<int64_t> max_steps_per_epoch;
  int64_t accum = 1;  // gradient_accumulation_steps
  std::optional<double> clip_grad_norm;
  bool optimizer_in_bwd = false;  // updates in the backward (training/optimizer_in_backward.h)
  bool activation_checkpointing = false;
  int64_t log_every = 1;
  bool log_memory = true;
  std::optional<int64_t> save_every;
  int64_t eval_every = 0;  // eval_every_n_steps or run_val_every_n_steps
  std::optional<int64_t> batch_size_val;  // null: batch_size
  bool resume = false;
  std::optional<int64_t> stop_after;
  std::optional<int64_t> keep_last_n;  // checkpointer.keep_last_n_checkpoints (null: keep all)
  TraceProfilerOptions profiler;
};
// Sets the process's log level (core/log.h) from `log_level` first.
// `seed: null` takes ChooseSeed's (logged as "Using seed N").
// optimizer_in_bwd: true with clip_grad_norm or gradient_accumulation_steps > 1 is
// InvalidArgument with torchtune's messages; the device's error when it is not usable.
absl::StatusOr<FinetuneSettings> ReadFinetuneSettings(const ConfigNode& root);

// torchtune's spellings of our validation keys: {ours, torchtune's}.
inline constexpr std::pair<const char*, const char*> kValidationKeyAliases[] = {
    {"validation_dataset", "dataset_val"}, {"eval_every_n_steps", "run_val_every_n_steps"}};
// One error per pair of kValidationKeyAliases both given in `given` (the config before the
// schema's defaults) with different values, naming both keys.
std::vector<ConfigError> ConflictingValidationKeys(const ConfigNode& given);
// The validation dataset's node: validation_dataset, else dataset_val; null when neither.
const ConfigNode* ValidationDatasetNode(const ConfigNode& root);

// The seed of a run configured with `seed: null`: on a resume the one LATEST's recipe state
// saved (so the resumed run is the uninterrupted one), otherwise a random one.
absl::StatusOr<int64_t> ChooseSeed(const std::string& output_dir, bool resume);

// A run's data: the training loader, the validation loader when `validation_dataset` is set,
// the optimizer steps per epoch (capped by max_steps_per_epoch), and the `lr_scheduler` over
// all epochs when set. InvalidArgument, naming the dataset, when an epoch has fewer batches
// than gradient_accumulation_steps.
struct FinetuneData {
  std::shared_ptr<const Dataset> dataset;
  std::optional<DataLoader> loader;  // always set
  std::optional<DataLoader> val_loader;
  int64_t steps_per_epoch = 0;
  std::optional<CosineScheduleWithWarmup> schedule;
};
// Data parallel: the training loader is rank `rank`'s of `num_replicas` (batch_size per
// rank; data/distributed_sampler.h); the validation loader is whole (rank 0 validates).
absl::StatusOr<FinetuneData> MakeFinetuneData(const ConfigNode& root, const TokenizerComponent& tok,
                                              const FinetuneSettings& s, int64_t num_replicas = 1,
                                              int64_t rank = 0);

// Where a run stands: optimizer steps done, training tokens consumed, and the last checkpoint
// written or resumed from ("(none)" before the first).
struct RunProgress {
  int64_t step = 0;
  int64_t tokens_seen = 0;
  std::string last_checkpoint = "(none)";
};

// Restores what `dir`'s recipe state holds besides the weights: checks the seed, then the
// optimizer state (`restore_optimizer`, given the loaded state), the data loader's position
// and the generator. Returns the progress saved.
absl::StatusOr<RunProgress> RestoreRecipeState(
    const std::string& dir, int64_t seed,
    const std::function<absl::Status(const RecipeState&)>& restore_optimizer, DataLoader& loader,
    Generator& gen);
// The restore of an optimizer whose whole state is in the recipe state.
absl::Status ImportOptimizerState(const RecipeState& state, Optimizer& optimizer);

// The recipe state to save with the weights after `progress.step` steps, in `epoch`.
RecipeState MakeRecipeState(const RunProgress& progress, int64_t epoch, int64_t seed,
                            const Generator& gen, const DataLoader& loader);

// Completes checkpoint <output_dir>/<name>/ once its weights are written: saves `state`
// (with the optimizer's state, SetOptimizerState) as kRecipeStateFile, then points LATEST at
// it (atomically, so LATEST only ever names a complete checkpoint) and, with `keep_last_n`,
// prunes (PruneCheckpoints).
absl::Status FinishCheckpoint(const std::string& output_dir, const std::string& name,
                              const RecipeState& state, std::optional<int64_t> keep_last_n);

// Removes the complete step_<N> folders of `output_dir` beyond the newest `keep_last_n`
// (by N), never `latest` (the one LATEST names, which counts as one of them). Returns the
// paths removed; the error names the folder that could not go.
absl::StatusOr<std::vector<std::string>> PruneCheckpoints(const std::string& output_dir,
                                                          const std::string& latest,
                                                          int64_t keep_last_n);

// The `metric_logger` component of `root`, or a StdoutLogger when it is absent or null.
absl::StatusOr<std::unique_ptr<MetricLogger>> MakeMetricLogger(const ConfigNode& root);

struct TrainingLoop {
  DecoderTrainer* trainer = nullptr;
  Optimizer* optimizer = nullptr;
  const CosineScheduleWithWarmup* schedule = nullptr;  // null: constant base_lr
  double base_lr = 0;
  DataLoader* loader = nullptr;
  DataLoader* val_loader = nullptr;  // null: no validation
  MetricLogger* logger = nullptr;
  TraceProfiler* profiler = nullptr;  // null: no trace
  std::string output_dir;  // where `save` writes CheckpointName(step); cleaned at the start
  Device device;
  int64_t epochs = 1;
  int64_t steps_per_epoch = 1;
  int64_t accum = 1;  // gradient_accumulation_steps
  double clip_norm = 0;  // 0: no clipping
  GradientHook after_backward;  // on each step's gradients before clipping (null: none)
  // Data parallel (null: one process): every rank runs the loop on its shard of the data;
  // tokens are counted over the ranks, a signal on any rank stops them all at the same step,
  // peak memory is the maximum over the ranks (on the CPU also peak_rss_gb, the largest
  // rank's peak resident set since the loop started), every rank validates (on the whole validation
  // set), and rank 0 alone logs, shows the progress bar and cleans the output folder.
  ProcessGroup* group = nullptr;
  const DataParallelHooks* data_parallel = nullptr;  // passed to TrainStep
  int64_t log_every = 1;
  bool log_memory = true;
  int64_t eval_every = 0;  // 0: at epoch ends
  std::optional<int64_t> save_every;
  std::optional<int64_t> stop_after;
  // Writes checkpoint <output_dir>/CheckpointName(step) of the run as it stands (for `epoch`,
  // the epoch the loader is in) and returns its directory.
  std::function<absl::StatusOr<std::string>(int64_t epoch)> save;
};

// A loop with the settings' periods and limits; the caller sets the trainer, optimizer,
// loaders, logger and save.
TrainingLoop MakeTrainingLoop(const FinetuneSettings& s, const FinetuneData& data);

// Trains from `progress` to the end of the last epoch (or stop_after): per step, takes
// `accum` micro-batches, sets the scheduled lr, runs TrainStep, logs loss / lr / grad_norm /
// tokens_per_second / epoch (/ peak_memory_gb) every log_every steps, the validation loss as
// configured, and checkpoints every save_every steps, at epoch ends and at stop_after. A
// failed step or a non-finite loss ends the run with an error naming the last good
// checkpoint. Closes the logger.
//
// Preemption: from the start of the loop, SIGTERM or SIGINT stops the run at the end of the
// step in flight (its data loading, validation and save count as part of it) with a
// checkpoint, as stop_after does, and returns InterruptedError naming the signal, the step
// and the checkpoint; a second signal exits at once (training/interrupt.h).
// Disks: the leftovers of failed or killed saves are removed at the start
// (RemoveCheckpointLeftovers); a failed save removes its own folder and ends the run with the
// error (which names the file and the errno text) and the last good checkpoint, which LATEST
// still names.
absl::Status RunTrainingLoop(const TrainingLoop& loop, RunProgress& progress);

}  // namespace cctune

#endif  // CCTUNE_RECIPES_FINETUNE_LOOP_H_
