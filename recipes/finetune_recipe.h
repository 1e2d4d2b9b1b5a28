// The fine-tune recipe skeleton: one run of named steps, shared by every fine-tune recipe,
// and a small strategy for what differs between them.
//
//   RecipeMain (recipes/recipe_main.h): --config, overrides, --help, validate, print, exit code
//     │
//   MakeFinetuneRecipe(strategy factory) ─ the RecipeEntry of a fine-tune recipe
//     │  settings (recipes/finetune_loop.h ReadFinetuneSettings)
//     ├─ 1 tokenizer   the `tokenizer` component
//     ├─ 2 model       strategy.BuildModel ─ checkpointer ─ strategy.LoadCheckpointWeights
//     │                (or random init from the seed) ─ strategy.AfterLoad
//     ├─ 3 optimizer   strategy.TrainableLayout (the gradient arena) ─ ConfigureTrainer ─
//     │                OptimizerBuffers ─ the `optimizer` component ─ the `loss` component
//     │                (ApplyLossComponent: its settings on the trainer)
//     ├─ 4 data        datasets, loaders, steps per epoch, lr schedule (MakeFinetuneData)
//     ├─ 5 restore     strategy.RestoreWeights(LATEST) ─ optimizer, loader, RNG (recipe state)
//     ├─ 6 train       RunTrainingLoop: TrainStep (─ strategy.AfterBackward) ─ log ─ validate
//     └─ 7 save        strategy.SaveWeights ─ recipe state ─ LATEST   (called by the loop)
//
// A strategy decides which parameters train (all of them, or the LoRA adapters: the gradient
// arena's layout, the trainer's frozen parameters, the optimizer's buffers) and what a
// checkpoint holds and how it is written and restored (full HF weights; or the PEFT adapter,
// the merged weights and adapter_config.json). Everything else, including the order of the
// generator's draws that bit-identical resume depends on, is the skeleton's. Full
// (recipes/full_finetune_single_device.cc) and LoRA (recipes/lora_finetune_single_device.cc)
// are the two strategies today. QLoRA is LoRA's, as in torchtune (the same recipe with a
// qlora_ builder): its LoadCheckpointWeights quantizes the model's NF4 layers while loading
// and its SaveWeights merges into the dequantized base (models/qlora.h). The hooks are where
// the next ones plug in without copying:
//   - DoRA: LoRA with a magnitude vector among the trainable parameters (TrainableLayout,
//     OptimizerBuffers) and in the adapter it saves (SaveWeights).
//   - Distributed recipes (recipes/data_parallel_strategy.h): Group and DataParallel make
//     the run data parallel; PrepareParameters pads the arena for sharding, TrainableLayout /
//     OptimizerBuffers give each rank its shard, SaveOptimizerState / RestoreOptimizerState
//     write and reshard each rank's optimizer state; the rest the full or LoRA strategy's,
//     decorated.
#ifndef CCTUNE_RECIPES_FINETUNE_RECIPE_H_
#define CCTUNE_RECIPES_FINETUNE_RECIPE_H_

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/checkpointer_components.h"
#include "checkpoint/hf.h"
#include "config/config.h"
#include "config/node.h"
#include "config/schema.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/random.h"
#include "distributed/process_group.h"
#include "models/registry.h"
#include "modules/parameters.h"
#include "modules/transformer_decoder.h"
#include "recipes/recipe_main.h"
#include "training/decoder_trainer.h"
#include "training/optim.h"
#include "training/recipe_state.h"
#include "training/train_step.h"

namespace cctune {

// The documentation of a fine-tune recipe's schema (recipes/finetune_loop.h
// FinetuneRecipeSchema): its name (also the program name in messages), what it does, and
// what its output_dir, model and checkpointer keys hold.
struct FinetuneRecipeDocs {
  const char* name;
  const char* doc;
  const char* output_dir;
  const char* model;
  const char* checkpointer;
};

// What differs between fine-tune recipes. One instance serves one run (it may keep what
// Configure read); the skeleton calls the hooks in the order they are declared.
class FinetuneStrategy {
 public:
  virtual ~FinetuneStrategy() = default;

  virtual FinetuneRecipeDocs docs() const = 0;
  // Adds the recipe's own top-level keys to the shared schema (e.g. LoRA's
  // save_adapter_weights_only).
  virtual void ExtendSchema(Schema& schema) const {}
  // Registers the model components the recipe's configs may name (the skeleton registers the
  // tokenizers, checkpointers, datasets, metric loggers and training components).
  virtual absl::Status RegisterModels() const;
  // Appends the problems of the resolved config (`root`) that only this strategy knows.
  virtual void Validate(const ConfigNode& root, std::vector<ConfigError>* errors) const {}

  // Model step. Configure reads what the strategy needs from the config (defaults applied).
  virtual absl::Status Configure(const ConfigNode& root) { return absl::OkStatus(); }
  // Builds the model; `args` come from the checkpoint (empty without one). Default: the
  // `model` component.
  virtual absl::StatusOr<std::unique_ptr<TransformerDecoder>> BuildModel(const ConfigNode& root,
                                                                         const ConfigNode& args);
  // The parameter arena of `model` in `dtype` on `device` with the checkpointer's weights
  // (what is not in the checkpoint, e.g. fresh adapters, is initialised from `gen`). Without
  // a checkpointer the skeleton initialises every parameter from `gen` instead.
  virtual absl::StatusOr<ParameterArena> LoadCheckpointWeights(TransformerDecoder& model,
                                                               const LoadedCheckpoint& ckpt,
                                                               DType dtype, const Device& device,
                                                               Generator& gen) = 0;
  // Called once the weights are in (checkpoint or random init), before AfterLoad: may
  // replace the arena by one with another buffer layout, bound to `model` (data parallel:
  // buffers padded for sharding).
  virtual absl::Status PrepareParameters(TransformerDecoder& model, ParameterArena& params) {
    return absl::OkStatus();
  }
  // Called once the weights are in: checks the model suits the strategy.
  virtual absl::Status AfterLoad(const TransformerDecoder& model, const ParameterArena& params) {
    return absl::OkStatus();
  }
  // What the "Model has N parameters (dtype)" line adds, e.g. ", M of them trainable (LoRA)".
  virtual std::string DescribeTrainable(const TransformerDecoder& model) const { return ""; }

  // Optimizer step: the f32 layout of the gradient arena (the parameters that train), the
  // trainer's options for it, and the optimizer's buffers over `params` and `grads`.
  virtual absl::StatusOr<ParameterLayout> TrainableLayout(const TransformerDecoder& model,
                                                          const ParameterArena& params) const = 0;
  virtual void ConfigureTrainer(DecoderTrainerOptions* options) const {}
  virtual absl::StatusOr<std::vector<ParamBuffer>> OptimizerBuffers(
      const ParameterArena& params, const ParameterArena& grads) const = 0;
  // Train step: runs on the gradients after each step's backward, before the norm, clipping
  // and update (null: none).
  virtual GradientHook AfterBackward() { return nullptr; }

  // Data parallel (the distributed recipes; null: one process). With a group the skeleton
  // gives each rank its shard of the data (batch_size per rank), passes DataParallel() to
  // every TrainStep (recipes/finetune_loop.h TrainingLoop::group), and lets rank 0 alone log
  // and write the weights and the recipe state of checkpoints (every rank restores them).
  // Called after Configure.
  virtual ProcessGroup* Group() { return nullptr; }
  virtual const DataParallelHooks* DataParallel() const { return nullptr; }
  // Called once the trainer and the optimizer exist (e.g. sets the model's parameter hook and
  // the trainer's gradient-ready hook).
  virtual absl::Status AttachTrainer(TransformerDecoder& model, DecoderTrainer& trainer) {
    return absl::OkStatus();
  }
  // Save step, on every rank: true before rank 0's SaveWeights (the arena must then hold
  // every weight, e.g. gathered from the shards), false after it.
  virtual absl::Status WholeWeights(bool whole) { return absl::OkStatus(); }
  // Save step, on every rank after rank 0's SaveWeights: puts the optimizer's state into the
  // recipe state rank 0 writes (the default), or writes this rank's part beside it.
  virtual absl::Status SaveOptimizerState(const std::string& dir, const Optimizer& optimizer,
                                          RecipeState* state) const;
  // Restore step: loads what SaveOptimizerState saved (`state`: dir's recipe state).
  virtual absl::Status RestoreOptimizerState(const std::string& dir, const RecipeState& state,
                                             Optimizer& optimizer) const;

  // Save step: writes the weights of checkpoint `dir` (the skeleton adds the recipe state and
  // moves LATEST). `config` is the model's config.json.
  virtual absl::Status SaveWeights(const std::string& dir, const ParameterArena& params,
                                   const HfModelConfig& config) const = 0;
  // Restore step: loads into `params` what SaveWeights wrote to `dir`; `trainable` is the
  // gradient arena's layout.
  virtual absl::Status RestoreWeights(const std::string& dir, const HfModelConfig& config,
                                      const ParameterLayout& trainable,
                                      ParameterArena& params) const = 0;
};

// A strategy made from another: every hook goes to the inner strategy unless a subclass
// overrides it, so a new recipe reuses a whole strategy and changes only what differs.
//   A distributed full fine-tune: StrategyDecorator(MakeFullFinetuneStrategy()) overriding
//     TrainableLayout, OptimizerBuffers, AfterBackward and SaveWeights.
class StrategyDecorator : public FinetuneStrategy {
 public:
  explicit StrategyDecorator(std::unique_ptr<FinetuneStrategy> inner)
      : inner_(std::move(inner)) {}

  FinetuneRecipeDocs docs() const override { return inner_->docs(); }
  void ExtendSchema(Schema& schema) const override { inner_->ExtendSchema(schema); }
  absl::Status RegisterModels() const override { return inner_->RegisterModels(); }
  void Validate(const ConfigNode& root, std::vector<ConfigError>* errors) const override {
    inner_->Validate(root, errors);
  }
  absl::Status Configure(const ConfigNode& root) override { return inner_->Configure(root); }
  absl::StatusOr<std::unique_ptr<TransformerDecoder>> BuildModel(const ConfigNode& root,
                                                                 const ConfigNode& args) override {
    return inner_->BuildModel(root, args);
  }
  absl::StatusOr<ParameterArena> LoadCheckpointWeights(TransformerDecoder& model,
                                                       const LoadedCheckpoint& ckpt, DType dtype,
                                                       const Device& device,
                                                       Generator& gen) override {
    return inner_->LoadCheckpointWeights(model, ckpt, dtype, device, gen);
  }
  absl::Status AfterLoad(const TransformerDecoder& model, const ParameterArena& params) override {
    return inner_->AfterLoad(model, params);
  }
  std::string DescribeTrainable(const TransformerDecoder& model) const override {
    return inner_->DescribeTrainable(model);
  }
  absl::StatusOr<ParameterLayout> TrainableLayout(const TransformerDecoder& model,
                                                  const ParameterArena& params) const override {
    return inner_->TrainableLayout(model, params);
  }
  void ConfigureTrainer(DecoderTrainerOptions* options) const override {
    inner_->ConfigureTrainer(options);
  }
  absl::StatusOr<std::vector<ParamBuffer>> OptimizerBuffers(
      const ParameterArena& params, const ParameterArena& grads) const override {
    return inner_->OptimizerBuffers(params, grads);
  }
  GradientHook AfterBackward() override { return inner_->AfterBackward(); }
  absl::Status PrepareParameters(TransformerDecoder& model, ParameterArena& params) override {
    return inner_->PrepareParameters(model, params);
  }
  absl::Status AttachTrainer(TransformerDecoder& model, DecoderTrainer& trainer) override {
    return inner_->AttachTrainer(model, trainer);
  }
  absl::Status WholeWeights(bool whole) override { return inner_->WholeWeights(whole); }
  ProcessGroup* Group() override { return inner_->Group(); }
  const DataParallelHooks* DataParallel() const override { return inner_->DataParallel(); }
  absl::Status SaveOptimizerState(const std::string& dir, const Optimizer& optimizer,
                                  RecipeState* state) const override {
    return inner_->SaveOptimizerState(dir, optimizer, state);
  }
  absl::Status RestoreOptimizerState(const std::string& dir, const RecipeState& state,
                                     Optimizer& optimizer) const override {
    return inner_->RestoreOptimizerState(dir, state, optimizer);
  }
  absl::Status SaveWeights(const std::string& dir, const ParameterArena& params,
                           const HfModelConfig& config) const override {
    return inner_->SaveWeights(dir, params, config);
  }
  absl::Status RestoreWeights(const std::string& dir, const HfModelConfig& config,
                              const ParameterLayout& trainable,
                              ParameterArena& params) const override {
    return inner_->RestoreWeights(dir, config, trainable, params);
  }

 private:
  std::unique_ptr<FinetuneStrategy> inner_;
};

// The recipe (for RecipeMain and `cctune run`) whose runs use a strategy from
// `make_strategy`: its schema, component registration, validation (the schema, the
// checkpoint and dataset files, the strategy's own checks) and the run of the steps above.
RecipeEntry MakeFinetuneRecipe(std::function<std::unique_ptr<FinetuneStrategy>()> make_strategy);

// The recipe of a default-constructible strategy, made once.
template <typename Strategy>
const RecipeEntry& FinetuneRecipeOf() {
  static const RecipeEntry* const recipe =
      new RecipeEntry(MakeFinetuneRecipe([] { return std::make_unique<Strategy>(); }));
  return *recipe;
}

}  // namespace cctune

#endif  // CCTUNE_RECIPES_FINETUNE_RECIPE_H_
