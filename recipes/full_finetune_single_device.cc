#include "recipes/full_finetune_single_device.h"

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpointer_components.h"
#include "checkpoint/hf.h"
#include "config/validate.h"
#include "core/device.h"
#include "core/random.h"
#include "core/status.h"
#include "data/collate.h"
#include "data/data_loader.h"
#include "data/dataset_components.h"
#include "generation/model_loader.h"
#include "modules/parameters.h"
#include "recipes/builtin_configs.h"
#include "recipes/checkpoint_dir.h"
#include "recipes/config_checks.h"
#include "recipes/finetune_loop.h"
#include "recipes/finetune_utils.h"
#include "recipes/model_components.h"
#include "tokenizers/tokenizer_components.h"
#include "training/decoder_trainer.h"
#include "training/metric_logger_components.h"
#include "training/recipe_state.h"
#include "training/train_step.h"
#include "training/training_components.h"

namespace cctune {

namespace {

Schema BuildSchema() {
  return FinetuneRecipeSchema(
      "full_finetune_single_device",
      "full fine-tune on one device (recipes/full_finetune_single_device)",
      "checkpoints (step_<N>/, LATEST) and logs", "model builder (cctune.models.*)",
      "initial weights (HF or llama2.c); null: random init from seed");
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

// Writes the weights of <output_dir>/step_<step>/, then FinishCheckpoint.
absl::Status SaveCheckpoint(const std::string& output_dir, const Run& run, RecipeState state) {
  const std::string name = CheckpointName(state.proto.step());
  const std::string dir = absl::StrCat(output_dir, "/", name);
  HfSaveOptions save_options;
  CCTUNE_RETURN_IF_ERROR(
      SaveHfCheckpoint(dir, run.params.ExportStateDict(), run.hf_config, save_options));
  return FinishCheckpoint(output_dir, name, *run.optimizer, std::move(state));
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
  CheckCheckpointerOutputDir(resolved.root(), &errors);
  for (const char* key : {"dataset", "validation_dataset"}) {
    for (ConfigError& e : MissingDatasetFiles(resolved.root(), key)) errors.push_back(e);
  }
  return errors;
}

absl::Status RunFullFinetuneRecipe(const Config& config) {
  CCTUNE_RETURN_IF_ERROR(RegisterFullFinetuneComponents());
  const ConfigNode root = WithDefaults(config.root(), FullFinetuneRecipeSchema());
  CCTUNE_ASSIGN_OR_RETURN(const FinetuneSettings s, ReadFinetuneSettings(root));
  const Device& device = s.device;
  const std::string& output_dir = s.output_dir;
  const int64_t seed = s.seed;
  Run run;
  run.dtype = s.dtype;

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
    CCTUNE_RETURN_IF_ERROR(CheckModelMatchesCheckpoint(*run.model, ckpt));
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
  trainer_options.activation_checkpointing = s.activation_checkpointing;
  CCTUNE_ASSIGN_OR_RETURN(run.trainer,
                          DecoderTrainer::Create(run.model.get(), &run.grads, trainer_options));
  CCTUNE_ASSIGN_OR_RETURN(std::vector<ParamBuffer> buffers,
                          ArenaParamBuffers(run.params, run.grads));
  CCTUNE_ASSIGN_OR_RETURN(run.optimizer,
                          OptimizerRegistry().InstantiateKey(root, "optimizer", buffers));
  run.base_lr = run.optimizer->lr();
  CCTUNE_RETURN_IF_ERROR(ApplyLossComponent(root, run.trainer.get()));

  // Data.
  CCTUNE_ASSIGN_OR_RETURN(FinetuneData data, MakeFinetuneData(root, tok, s));
  DataLoader& loader = *data.loader;
  run.schedule = data.schedule;

  // Resume.
  RunProgress progress;
  if (s.resume) {
    CCTUNE_ASSIGN_OR_RETURN(const std::string dir, LatestCheckpointDir(output_dir));
    HfLoadOptions load_options;
    load_options.alias_tied_output = false;
    CCTUNE_ASSIGN_OR_RETURN(HfCheckpoint hf, LoadHfCheckpoint(dir, load_options));
    CCTUNE_RETURN_IF_ERROR(run.params.LoadStateDict(hf.state_dict).status());
    CCTUNE_ASSIGN_OR_RETURN(progress,
                            RestoreRecipeState(dir, seed, *run.optimizer, loader, gen));
  }

  CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<MetricLogger> logger, MakeMetricLogger(root));
  std::fprintf(stderr,
               "Model has %lld parameters (%s); %lld samples, %lld steps per epoch, %lld epochs\n",
               static_cast<long long>(run.params.NumParameters()), s.dtype_name.c_str(),
               static_cast<long long>(data.dataset->size()),
               static_cast<long long>(data.steps_per_epoch), static_cast<long long>(s.epochs));

  TrainingLoop loop = MakeTrainingLoop(s, data);
  loop.trainer = run.trainer.get();
  loop.optimizer = run.optimizer.get();
  loop.schedule = run.schedule.has_value() ? &*run.schedule : nullptr;
  loop.base_lr = run.base_lr;
  loop.loader = &loader;
  loop.val_loader = data.val_loader.has_value() ? &*data.val_loader : nullptr;
  loop.logger = logger.get();
  loop.save = [&](int64_t epoch) -> absl::StatusOr<std::string> {
    CCTUNE_RETURN_IF_ERROR(
        SaveCheckpoint(output_dir, run, MakeRecipeState(progress, epoch, seed, gen, loader)));
    return absl::StrCat(output_dir, "/", CheckpointName(progress.step));
  };
  return RunTrainingLoop(loop, progress);
}

int FullFinetuneMain(const std::vector<std::string>& args) {
  return RecipeMain({"full_finetune_single_device", &FullFinetuneRecipeSchema,
                     RegisterFullFinetuneComponents, ValidateFullFinetuneConfig,
                     RunFullFinetuneRecipe},
                    args);
}

}  // namespace cctune
