#include "recipes/finetune_recipe.h"

#include <cstdio>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "config/validate.h"
#include "core/log.h"
#include "core/status.h"
#include "data/dataset_components.h"
#include "recipes/checkpoint_dir.h"
#include "recipes/finetune_loop.h"
#include "recipes/finetune_utils.h"
#include "models/registry.h"
#include "tokenizers/tokenizer_components.h"
#include "training/metric_logger_components.h"
#include "training/optimizer_in_backward.h"
#include "training/recipe_state.h"
#include "training/training_components.h"

namespace cctune {

absl::Status FinetuneStrategy::RegisterModels() const { return RegisterModelComponents(); }

absl::Status FinetuneStrategy::SaveOptimizerState(const std::string& dir,
                                                  const Optimizer& optimizer,
                                                  RecipeState* state) const {
  SetOptimizerState(optimizer.ExportState(), state);
  return absl::OkStatus();
}

absl::Status FinetuneStrategy::RestoreOptimizerState(const std::string& dir,
                                                     const RecipeState& state,
                                                     Optimizer& optimizer) const {
  return ImportOptimizerState(state, optimizer);
}

absl::StatusOr<std::unique_ptr<TransformerDecoder>> FinetuneStrategy::BuildModel(
    const ConfigNode& root, const ConfigNode& args) {
  return ModelComponentRegistry().InstantiateKey(root, "model", args);
}

namespace {

absl::Status RegisterComponents(const FinetuneStrategy& strategy) {
  CCTUNE_RETURN_IF_ERROR(strategy.RegisterModels());
  CCTUNE_RETURN_IF_ERROR(RegisterCheckpointers());
  CCTUNE_RETURN_IF_ERROR(RegisterTokenizers());
  CCTUNE_RETURN_IF_ERROR(RegisterDatasets());
  CCTUNE_RETURN_IF_ERROR(RegisterMetricLoggers());
  CCTUNE_RETURN_IF_ERROR(RegisterTrainingComponents());
  return absl::OkStatus();
}

std::vector<ConfigError> ValidateConfig(const Config& config, const FinetuneStrategy& strategy,
                                        const Schema& schema) {
  CCTUNE_CHECK_OK(RegisterComponents(strategy));
  std::vector<ConfigError> errors = Validate(config, schema);
  Config resolved = config;
  if (!resolved.resolved()) resolved.ResolveCollectingErrors();  // errors already reported
  CheckRecipeCheckpointer(resolved.root(), &errors);
  for (ConfigError& e : ConflictingValidationKeys(config.root())) errors.push_back(e);
  for (const char* key : {"dataset", "validation_dataset", "dataset_val"}) {
    for (ConfigError& e : MissingDatasetFiles(resolved.root(), key)) errors.push_back(e);
  }
  strategy.Validate(resolved.root(), &errors);
  return errors;
}

// One run: the steps of recipes/finetune_recipe.h in order, and what they build.
class FinetuneRun {
 public:
  FinetuneRun(FinetuneStrategy& strategy, const ConfigNode& root, FinetuneSettings settings)
      : strategy_(strategy), root_(root), s_(std::move(settings)),
        gen_(static_cast<uint64_t>(s_.seed)) {}

  absl::Status Run() {
    CCTUNE_RETURN_IF_ERROR(strategy_.Configure(root_));
    group_ = strategy_.Group();
    if (group_ != nullptr) {
      CCTUNE_RETURN_IF_ERROR(UseRankZerosSeed());
      CCTUNE_RETURN_IF_ERROR(SplitGlobalBatch());
    }
    CCTUNE_RETURN_IF_ERROR(TokenizerStep());
    CCTUNE_RETURN_IF_ERROR(ModelStep());
    CCTUNE_RETURN_IF_ERROR(OptimizerStep());
    CCTUNE_RETURN_IF_ERROR(DataStep());
    CCTUNE_RETURN_IF_ERROR(RestoreStep());
    return TrainingStep();
  }

 private:
  absl::Status TokenizerStep() {
    CCTUNE_ASSIGN_OR_RETURN(tok_, TokenizerRegistry().InstantiateKey(root_, "tokenizer"));
    return absl::OkStatus();
  }

  // The model and its weights: the checkpointer's (sizing the model, as torchtune's order
  // has it), or a random init from the seed.
  absl::Status ModelStep() {
    if (const ConfigNode* ck = root_.Find("checkpointer"); ck != nullptr && !ck->IsNull()) {
      CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<Checkpointer> checkpointer,
                              CheckpointerRegistry().Instantiate(*ck));
      CCTUNE_ASSIGN_OR_RETURN(LoadedCheckpoint ckpt, checkpointer->LoadCheckpoint());
      CCTUNE_ASSIGN_OR_RETURN(model_, strategy_.BuildModel(root_, ckpt.model_args));
      CCTUNE_RETURN_IF_ERROR(CheckModelMatchesCheckpoint(*model_, ckpt));
      CCTUNE_ASSIGN_OR_RETURN(
          params_, strategy_.LoadCheckpointWeights(*model_, ckpt, s_.dtype, s_.device, gen_));
    } else {
      CCTUNE_ASSIGN_OR_RETURN(model_, strategy_.BuildModel(root_, ConfigNode()));
      CCTUNE_ASSIGN_OR_RETURN(params_, ParameterArena::Create(*model_, s_.dtype, s_.device));
      CCTUNE_RETURN_IF_ERROR(params_.InitializeRandom(gen_));
    }
    CCTUNE_RETURN_IF_ERROR(strategy_.PrepareParameters(*model_, params_));
    CCTUNE_RETURN_IF_ERROR(strategy_.AfterLoad(*model_, params_));
    if (tok_->tokenizer->vocab_size() > model_->vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the tokenizer has ", tok_->tokenizer->vocab_size(), " tokens but the model only ",
          model_->vocab_size(), ": set model.vocab_size"));
    }
    hf_config_ = ModelHfConfig(*model_, params_, s_.dtype);
    return absl::OkStatus();
  }

  // The gradient arena of what trains, the trainer and the optimizer over them, and the
  // loss component's settings on the trainer.
  absl::Status OptimizerStep() {
    CCTUNE_ASSIGN_OR_RETURN(trainable_, strategy_.TrainableLayout(*model_, params_));
    DecoderTrainerOptions options;
    options.activation_checkpointing = s_.activation_checkpointing;
    strategy_.ConfigureTrainer(&options);
    if (s_.optimizer_in_bwd) {
      // One optimizer per backward stage over per-parameter buffers, updated by the trainer's
      // gradient-ready hook; only one layer's gradients exist at a time.
      CCTUNE_ASSIGN_OR_RETURN(
          std::unique_ptr<OptimizerInBackward> in_bwd,
          OptimizerInBackward::Create(
              *model_, params_, trainable_, [this](const std::vector<ParamBuffer>& buffers) {
                return OptimizerRegistry().InstantiateKey(root_, "optimizer", buffers);
              }));
      CCTUNE_ASSIGN_OR_RETURN(trainer_,
                              DecoderTrainer::Create(model_.get(), in_bwd->gradients(), options));
      in_bwd->Attach(*trainer_);
      LogInfo("optimizer_in_bwd: gradient buffers %.2f MiB (a gradient arena would be %.2f MiB)",
              in_bwd->GradientBytes() / 1048576.0, trainable_.Bytes() / 1048576.0);
      optimizer_ = std::move(in_bwd);
    } else {
      CCTUNE_ASSIGN_OR_RETURN(grads_, ParameterArena::Allocate(trainable_, s_.device));
      CCTUNE_ASSIGN_OR_RETURN(trainer_, DecoderTrainer::Create(model_.get(), &grads_, options));
      CCTUNE_ASSIGN_OR_RETURN(std::vector<ParamBuffer> buffers,
                              strategy_.OptimizerBuffers(params_, grads_));
      CCTUNE_ASSIGN_OR_RETURN(optimizer_,
                              OptimizerRegistry().InstantiateKey(root_, "optimizer", buffers));
      LogInfo("Gradient arena %.2f MiB", grads_.Bytes() / 1048576.0);
    }
    if (!s_.optimizer_in_bwd) CCTUNE_RETURN_IF_ERROR(strategy_.AttachTrainer(*model_, *trainer_));
    // Dropout (LoRA's) draws its masks from the recipe's generator, whose state the
    // checkpoints save and a resume restores, so a resumed run drops the same elements.
    trainer_->set_generator(&gen_);
    base_lr_ = optimizer_->lr();  // before a resume imports the optimizer's state
    LogInfo("Optimizer %s: state %.2f MiB", optimizer_->name(),
            optimizer_->StateBytes() / 1048576.0);
    CCTUNE_RETURN_IF_ERROR(ApplyLossComponent(root_, trainer_.get()));
    return absl::OkStatus();
  }

  absl::Status DataStep() {
    CCTUNE_ASSIGN_OR_RETURN(data_, MakeFinetuneData(root_, *tok_, s_, world_size(), rank()));
    return absl::OkStatus();
  }

  // With resume_from_checkpoint: the weights and the recipe state of LATEST.
  absl::Status RestoreStep() {
    if (!s_.resume) return absl::OkStatus();
    CCTUNE_ASSIGN_OR_RETURN(const std::string dir, LatestCheckpointDir(s_.output_dir));
    CCTUNE_RETURN_IF_ERROR(strategy_.RestoreWeights(dir, hf_config_, trainable_, params_));
    CCTUNE_ASSIGN_OR_RETURN(
        progress_, RestoreRecipeState(
                       dir, s_.seed,
                       [&](const RecipeState& state) {
                         return strategy_.RestoreOptimizerState(dir, state, *optimizer_);
                       },
                       *data_->loader, gen_));
    return absl::OkStatus();
  }

  absl::Status TrainingStep() {
    // Rank 0 alone logs: the others get a logger that the loop never writes to.
    std::unique_ptr<MetricLogger> logger;
    if (rank() == 0) {
      CCTUNE_ASSIGN_OR_RETURN(logger, MakeMetricLogger(root_));
    } else {
      logger = std::make_unique<StdoutLogger>();
    }
    LogInfo("Model has %lld parameters (%s)%s; %lld samples, %lld steps per epoch, %lld epochs",
                 static_cast<long long>(params_.NumParameters()), s_.dtype_name.c_str(),
                 strategy_.DescribeTrainable(*model_).c_str(),
                 static_cast<long long>(data_->dataset->size()),
                 static_cast<long long>(data_->steps_per_epoch),
                 static_cast<long long>(s_.epochs));
    TrainingLoop loop = MakeTrainingLoop(s_, *data_);
    loop.trainer = trainer_.get();
    loop.optimizer = optimizer_.get();
    loop.schedule = data_->schedule.has_value() ? &*data_->schedule : nullptr;
    loop.base_lr = base_lr_;
    loop.loader = &*data_->loader;
    loop.val_loader = data_->val_loader.has_value() ? &*data_->val_loader : nullptr;
    loop.logger = logger.get();
    TraceProfiler profiler(s_.profiler);
    if (profiler.enabled()) loop.profiler = &profiler;
    loop.after_backward = strategy_.AfterBackward();
    loop.group = group_;
    loop.data_parallel = strategy_.DataParallel();
    loop.save = [this](int64_t epoch) { return SaveStep(epoch); };
    return RunTrainingLoop(loop, progress_);
  }

  // Checkpoint <output_dir>/step_<N>/: the strategy's weights, then the recipe state and
  // LATEST (FinishCheckpoint).
  absl::StatusOr<std::string> SaveStep(int64_t epoch) {
    RecipeState state = MakeRecipeState(progress_, epoch, s_.seed, gen_, *data_->loader);
    const std::string name = CheckpointName(progress_.step);
    const std::string dir = absl::StrCat(s_.output_dir, "/", name);
    CCTUNE_RETURN_IF_ERROR(strategy_.WholeWeights(true));
    if (rank() == 0) CCTUNE_RETURN_IF_ERROR(strategy_.SaveWeights(dir, params_, hf_config_));
    CCTUNE_RETURN_IF_ERROR(strategy_.WholeWeights(false));
    if (group_ != nullptr) CCTUNE_RETURN_IF_ERROR(group_->Barrier());  // the folder exists
    CCTUNE_RETURN_IF_ERROR(strategy_.SaveOptimizerState(dir, *optimizer_, &state));
    // Every rank's part is on disk before rank 0 makes the checkpoint complete (LATEST).
    if (group_ != nullptr) CCTUNE_RETURN_IF_ERROR(group_->Barrier());
    if (rank() == 0) {
      CCTUNE_RETURN_IF_ERROR(FinishCheckpoint(s_.output_dir, name, state, s_.keep_last_n));
    }
    if (group_ != nullptr) CCTUNE_RETURN_IF_ERROR(group_->Barrier());
    return dir;
  }

  // Every rank takes rank 0's seed: with `seed: null` each rank drew its own, and the ranks
  // must initialise, shuffle and drop out alike.
  absl::Status UseRankZerosSeed() {
    CCTUNE_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty({1}, DType::kI64));
    t.data<int64_t>()[0] = s_.seed;
    CCTUNE_RETURN_IF_ERROR(group_->Broadcast(t, 0));
    if (t.data<int64_t>()[0] != s_.seed) {
      s_.seed = t.data<int64_t>()[0];
      gen_.SetState(static_cast<uint64_t>(s_.seed), 0);
      LogInfo("Using rank 0's seed %lld", static_cast<long long>(s_.seed));
    }
    return absl::OkStatus();
  }

  // global_batch_size (the distributed recipes' key), when set, decides batch_size per rank.
  absl::Status SplitGlobalBatch() {
    const ConfigNode* g = root_.Find("global_batch_size");
    if (g == nullptr || g->IsNull()) return absl::OkStatus();
    CCTUNE_ASSIGN_OR_RETURN(const int64_t global, root_.GetInt("global_batch_size"));
    const int64_t split = world_size() * s_.accum;
    if (global % split != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "global_batch_size ", global, " does not split over ", world_size(), " ranks x ",
          s_.accum, " gradient_accumulation_steps (", split, ")"));
    }
    s_.batch_size = global / split;
    LogInfo("global_batch_size %lld: batch_size %lld per rank", static_cast<long long>(global),
            static_cast<long long>(s_.batch_size));
    return absl::OkStatus();
  }

  int rank() const { return group_ == nullptr ? 0 : group_->rank(); }
  int world_size() const { return group_ == nullptr ? 1 : group_->world_size(); }

  FinetuneStrategy& strategy_;
  ProcessGroup* group_ = nullptr;  // the strategy's (data parallel), or null
  const ConfigNode& root_;
  FinetuneSettings s_;  // the seed may come from rank 0 (UseRankZerosSeed)
  Generator gen_;
  std::optional<TokenizerComponent> tok_;
  std::unique_ptr<TransformerDecoder> model_;
  ParameterArena params_;
  HfModelConfig hf_config_;
  ParameterLayout trainable_;  // the strategy's: what trains
  ParameterArena grads_;       // its gradient arena (none with optimizer_in_bwd)
  std::unique_ptr<DecoderTrainer> trainer_;
  std::unique_ptr<Optimizer> optimizer_;
  double base_lr_ = 0;
  std::optional<FinetuneData> data_;
  RunProgress progress_;
};

}  // namespace

RecipeEntry MakeFinetuneRecipe(std::function<std::unique_ptr<FinetuneStrategy>()> make_strategy) {
  // What the schema and the checks need; each run gets a strategy of its own.
  auto prototype = std::shared_ptr<const FinetuneStrategy>(make_strategy());
  const FinetuneRecipeDocs d = prototype->docs();
  Schema full_schema = FinetuneRecipeSchema(d.name, d.doc, d.output_dir, d.model, d.checkpointer);
  prototype->ExtendSchema(full_schema);
  auto schema = std::make_shared<const Schema>(std::move(full_schema));
  RecipeEntry entry;
  entry.prog = d.name;
  entry.schema = [schema]() -> const Schema& { return *schema; };
  entry.register_components = [prototype] { return RegisterComponents(*prototype); };
  entry.validate = [prototype, schema](const Config& config) {
    return ValidateConfig(config, *prototype, *schema);
  };
  entry.run = [make_strategy, schema](const Config& config) -> absl::Status {
    const std::unique_ptr<FinetuneStrategy> strategy = make_strategy();
    CCTUNE_RETURN_IF_ERROR(RegisterComponents(*strategy));
    CCTUNE_RETURN_IF_ERROR(ErrorsToStatus(ConflictingValidationKeys(config.root())));
    const ConfigNode root = WithDefaults(config.root(), *schema);
    CCTUNE_ASSIGN_OR_RETURN(FinetuneSettings settings, ReadFinetuneSettings(root));
    return FinetuneRun(*strategy, root, std::move(settings)).Run();
  };
  return entry;
}

}  // namespace cctune
