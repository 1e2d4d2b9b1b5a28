#include "recipes/full_finetune_single_device.h"

#include <memory>
#include <string>
#include <vector>

#include "checkpoint/hf.h"
#include "core/status.h"
#include "generation/model_loader.h"
#include "recipes/finetune_recipe.h"

namespace cctune {

namespace {

// Every parameter trains; a checkpoint holds the model's weights in HF layout.
class FullStrategy final : public FinetuneStrategy {
 public:
  FinetuneRecipeDocs docs() const override {
    return {"full_finetune_single_device",
            "full fine-tune on one device (recipes/full_finetune_single_device)",
            "checkpoints (step_<N>/, LATEST) and logs", "model builder (cctune.models.*)",
            "initial weights (HF or llama2.c); null: random init from seed"};
  }

  absl::StatusOr<ParameterArena> LoadCheckpointWeights(TransformerDecoder& model,
                                                       const LoadedCheckpoint& ckpt, DType dtype,
                                                       const Device& device,
                                                       Generator& gen) override {
    return LoadWeights(model, ckpt.state_dict, dtype, device);
  }

  absl::StatusOr<ParameterLayout> TrainableLayout(const TransformerDecoder& model,
                                                  const ParameterArena& params) const override {
    return params.layout().WithDType(DType::kF32);
  }

  absl::StatusOr<std::vector<ParamBuffer>> OptimizerBuffers(
      const ParameterArena& params, const ParameterArena& grads) const override {
    return ArenaParamBuffers(params, grads);
  }

  absl::Status SaveWeights(const std::string& dir, const ParameterArena& params,
                           const HfModelConfig& config) const override {
    return SaveHfCheckpoint(dir, params.ExportStateDict(), config, HfSaveOptions());
  }

  absl::Status RestoreWeights(const std::string& dir, const HfModelConfig& config,
                              const ParameterLayout& trainable,
                              ParameterArena& params) const override {
    HfLoadOptions options;
    options.alias_tied_output = false;
    CCTUNE_ASSIGN_OR_RETURN(HfCheckpoint hf, LoadHfCheckpoint(dir, options));
    return params.LoadStateDict(hf.state_dict).status();
  }
};

}  // namespace

const RecipeEntry& FullFinetuneRecipe() { return FinetuneRecipeOf<FullStrategy>(); }

std::unique_ptr<FinetuneStrategy> MakeFullFinetuneStrategy() { return std::make_unique<FullStrategy>(); }

}  // namespace cctune
