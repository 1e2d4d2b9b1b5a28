#include "recipes/full_finetune_distributed.h"

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/log.h"
#include "core/status.h"
#include "distributed/fsdp.h"
#include "recipes/data_parallel_strategy.h"
#include "recipes/finetune_loop.h"
#include "recipes/full_finetune_single_device.h"
#include "training/recipe_state.h"

namespace cctune {

std::string OptimizerShardFile(int rank, int world_size) {
  return absl::StrCat("optimizer_shard_", rank, "_of_", world_size, ".safetensors");
}

namespace {

namespace fs = std::filesystem;

// The world size of the optimizer shards in `dir` (optimizer_shard_<r>_of_<N>), checking that
// all N are there.
absl::StatusOr<int> SavedWorldSize(const std::string& dir) {
  std::optional<int> world;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    constexpr absl::string_view kPrefix = "optimizer_shard_";
    if (!absl::StartsWith(name, kPrefix)) continue;
    const size_t of = name.find("_of_");
    const size_t dot = name.rfind('.');
    int n = 0;
    if (of == std::string::npos || dot == std::string::npos || dot < of ||
        !absl::SimpleAtoi(name.substr(of + 4, dot - of - 4), &n) || n < 1) {
      continue;
    }
    if (world.has_value() && *world != n) {
      return absl::FailedPreconditionError(absl::StrCat(
          "resume: ", dir, " holds optimizer shards of ", *world, " and of ", n, " ranks"));
    }
    world = n;
  }
  if (ec) return absl::NotFoundError(absl::StrCat("resume: cannot list ", dir, ": ", ec.message()));
  if (!world.has_value()) {
    return absl::NotFoundError(absl::StrCat(
        "resume: ", dir, " has no optimizer_shard_<r>_of_<N>.safetensors (not a checkpoint of "
        "full_finetune_distributed)"));
  }
  for (int r = 0; r < *world; ++r) {
    const std::string path = absl::StrCat(dir, "/", OptimizerShardFile(r, *world));
    if (!fs::exists(path)) {
      return absl::NotFoundError(absl::StrCat("resume: ", path, " is missing (the checkpoint of ",
                                              *world, " ranks is incomplete)"));
    }
  }
  return *world;
}

class FsdpStrategy final : public DataParallelStrategy {
 public:
  FsdpStrategy()
      : DataParallelStrategy(
            MakeFullFinetuneStrategy(),
            {"full_finetune_distributed",
             "full fine-tune on N ranks, optimizer state and gradients sharded "
             "(recipes/full_finetune_distributed)",
             "checkpoints (step_<N>/: HF weights, recipe state, one optimizer shard per rank; "
             "LATEST) and logs",
             "model builder (cctune.models.*)",
             "initial weights (HF or llama2.c); null: random init from seed"}) {}

  absl::Status PrepareParameters(TransformerDecoder& model, ParameterArena& params) override {
    CCTUNE_RETURN_IF_ERROR(DataParallelStrategy::PrepareParameters(model, params));
    return PadArenaForSharding(model, pg().world_size(), params);
  }

  absl::StatusOr<ParameterLayout> TrainableLayout(const TransformerDecoder& model,
                                                  const ParameterArena& params) const override {
    CCTUNE_ASSIGN_OR_RETURN(ParameterLayout layout,
                            DataParallelStrategy::TrainableLayout(model, params));
    num_layers_ = static_cast<int>(model.num_layers());
    tied_ = params.layout().Find("output.weight") == nullptr;
    return layout.PadBuffersTo(pg().world_size());
  }

  // Per-layer units (ZeRO-3) when the arena allows them (one buffer), else the whole-buffer
  // sharding of the optimizer state and gradients.
  absl::StatusOr<std::vector<ParamBuffer>> OptimizerBuffers(
      const ParameterArena& params, const ParameterArena& grads) const override {
    absl::StatusOr<std::unique_ptr<LayerShardedArena>> layered = LayerShardedArena::Create(
        &pg(), params, grads, num_layers_, tied_, reshard_after_forward());
    if (layered.ok()) {
      layered_ = std::move(*layered);
      LayerShardedArena* l = layered_.get();
      // Per unit, in the backward; the last ones are waited for here at the latest.
      hooks_.reduce_gradients = [l](const std::vector<Tensor>&) { return l->FinishGradients(); };
      hooks_.sharded_gradients = true;
      hooks_.after_update = [l] { return l->ReleaseAll(); };
      LogInfo("Sharded per layer over %d ranks (%d units, reshard_after_forward %s): this "
              "rank's gradient shard %.2f MiB of %.2f MiB",
              pg().world_size(), l->num_units(), reshard_after_forward() ? "true" : "false",
              l->ShardGradientBytes() / 1048576.0, grads.Bytes() / 1048576.0);
      return l->OptimizerBuffers();
    }
    LogWarning("%s; sharding the optimizer state and gradients of whole buffers instead",
               std::string(layered.status().message()).c_str());
    CCTUNE_ASSIGN_OR_RETURN(ShardedArena sharded, ShardedArena::Create(&pg(), params, grads));
    sharded_ = std::make_unique<ShardedArena>(std::move(sharded));
    ShardedArena* s = sharded_.get();
    hooks_.reduce_gradients = [s](const std::vector<Tensor>&) {
      return s->ReduceScatterGradients();
    };
    hooks_.sharded_gradients = true;
    hooks_.after_update = [s] { return s->AllGatherParameters(); };
    LogInfo("Sharded over %d ranks: this rank's gradient shard %.2f MiB (of %.2f MiB reduced)",
            pg().world_size(), s->ShardGradientBytes() / 1048576.0, grads.Bytes() / 1048576.0);
    return s->OptimizerBuffers();
  }

  absl::Status AttachTrainer(TransformerDecoder& model, DecoderTrainer& trainer) override {
    if (layered_ == nullptr) return absl::OkStatus();
    LayerShardedArena* l = layered_.get();
    model.set_parameter_hook([l](int stage, bool backward) { return l->BeforeStage(stage, backward); });
    trainer.set_gradient_ready_hook([l](int stage) { return l->GradientsReady(stage); });
    return absl::OkStatus();
  }

  absl::Status WholeWeights(bool whole) override {
    if (!whole) TestKillPoint("save");
    if (layered_ == nullptr) return absl::OkStatus();
    return whole ? layered_->GatherAll() : layered_->ReleaseAll();
  }

  absl::Status SaveOptimizerState(const std::string& dir, const Optimizer& optimizer,
                                  RecipeState* state) const override {
    RecipeState shard;
    shard.proto.set_seed(state->proto.seed());
    shard.proto.set_step(state->proto.step());
    SetOptimizerState(optimizer.ExportState(), &shard);
    return SaveRecipeState(
        absl::StrCat(dir, "/", OptimizerShardFile(pg().rank(), pg().world_size())), shard);
  }

  absl::Status RestoreOptimizerState(const std::string& dir, const RecipeState& state,
                                     Optimizer& optimizer) const override {
    CCTUNE_ASSIGN_OR_RETURN(const int saved_world, SavedWorldSize(dir));
    // The ranks this one needs: its own at the same world size, every one otherwise.
    const bool same = saved_world == pg().world_size();
    std::vector<OptimizerState> old;
    std::vector<RecipeState> files;  // the tensors view the mapped files: keep them open
    for (int r = same ? pg().rank() : 0; r < (same ? pg().rank() + 1 : saved_world); ++r) {
      const std::string path = absl::StrCat(dir, "/", OptimizerShardFile(r, saved_world));
      CCTUNE_ASSIGN_OR_RETURN(RecipeState f, LoadRecipeState(path));
      CCTUNE_ASSIGN_OR_RETURN(OptimizerState os, GetOptimizerState(f));
      old.push_back(std::move(os));
      files.push_back(std::move(f));
    }
    if (same) return optimizer.ImportState(old[0]);
    std::map<std::string, ShardSpan> shard_numel;
    if (layered_ != nullptr) {
      shard_numel = layered_->ShardSpans();
    } else {
      for (const ParamBuffer& b : sharded_->OptimizerBuffers()) {
        shard_numel[b.name] = ShardSpan{b.param.numel(), b.param.numel()};
      }
    }
    CCTUNE_ASSIGN_OR_RETURN(OptimizerState mine,
                            ReshardOptimizerState(old, shard_numel, pg().rank(), pg().world_size()));
    LogInfo("Resharded the optimizer state of %d ranks to rank %d of %d", saved_world, pg().rank(),
            pg().world_size());
    return optimizer.ImportState(mine);
  }

 private:
  // Made by OptimizerBuffers (const in the interface; the skeleton calls it once): one of them.
  mutable std::unique_ptr<LayerShardedArena> layered_;
  mutable std::unique_ptr<ShardedArena> sharded_;
  mutable int num_layers_ = 0;
  mutable bool tied_ = false;
};

}  // namespace

const RecipeEntry& FullFinetuneDistributedRecipe() { return FinetuneRecipeOf<FsdpStrategy>(); }

}  // namespace cctune
