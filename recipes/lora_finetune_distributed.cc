#include "recipes/lora_finetune_distributed.h"

#include <memory>
#include <utility>
#include <vector>

#include "core/log.h"
#include "core/status.h"
#include "distributed/fsdp.h"
#include "recipes/data_parallel_strategy.h"
#include "recipes/lora_finetune_single_device.h"

namespace cctune {

namespace {

class LoRADataParallelStrategy final : public DataParallelStrategy {
 public:
  LoRADataParallelStrategy()
      : DataParallelStrategy(
            MakeLoRAFinetuneStrategy(),
            {"lora_finetune_distributed",
             "LoRA fine-tune on N ranks, adapter gradients all-reduced, base replicated or sharded "
             "(recipes/lora_finetune_distributed)",
             "checkpoints (step_<N>/: adapter, merged weights, state; LATEST) and logs",
             "LoRA model builder (torchtune.models.*.lora_*)",
             "base weights (HF or llama2.c); null: random init from seed"}) {}

  void ExtendSchema(Schema& schema) const override {
    DataParallelStrategy::ExtendSchema(schema);
    schema.Default("fsdp_shard_frozen_base", KeyType::Bool(), ConfigNode::Bool(false),
                   "shard the frozen base weights per layer over the ranks (gathered before "
                   "each layer's forward and backward, as torchtune's FSDP2 does) instead of "
                   "replicating them; the adapters stay replicated (docs/distributed.md)");
  }

  absl::Status Configure(const ConfigNode& root) override {
    CCTUNE_RETURN_IF_ERROR(DataParallelStrategy::Configure(root));
    CCTUNE_ASSIGN_OR_RETURN(shard_base_, root.GetBool("fsdp_shard_frozen_base"));
    return absl::OkStatus();
  }

  absl::StatusOr<ParameterLayout> TrainableLayout(const TransformerDecoder& model,
                                                  const ParameterArena& params) const override {
    num_layers_ = static_cast<int>(model.num_layers());
    tied_ = params.layout().Find("output.weight") == nullptr;
    return DataParallelStrategy::TrainableLayout(model, params);
  }

  absl::StatusOr<std::vector<ParamBuffer>> OptimizerBuffers(
      const ParameterArena& params, const ParameterArena& grads) const override {
    std::vector<Tensor> buffers = grads.buffers();  // shares the arena's storage
    ProcessGroup* pg = &this->pg();
    hooks_.reduce_gradients = [pg, buffers](const std::vector<Tensor>&) mutable -> absl::Status {
      for (Tensor& b : buffers) CCTUNE_RETURN_IF_ERROR(pg->AllReduce(b, ReduceOp::kSum));
      return absl::OkStatus();
    };
    hooks_.sharded_gradients = false;
    LogInfo("Adapter gradients all-reduced over %d ranks: %.2f MiB per step", pg->world_size(),
            grads.Bytes() / 1048576.0);
    if (shard_base_ && pg->world_size() > 1) {
      // The trainable parameters (the adapters) stay resident on every rank.
      std::vector<std::pair<int64_t, int64_t>> keep;
      for (const ParameterLayout::Entry& e : grads.layout().entries()) {
        const ParameterLayout::Entry* p = params.layout().Find(e.spec.name);
        if (p != nullptr) keep.push_back({p->offset, p->offset + p->numel});
      }
      absl::StatusOr<std::unique_ptr<LayerShardedArena>> base = LayerShardedArena::CreateFrozen(
          pg, params, num_layers_, tied_, reshard_after_forward(), std::move(keep));
      if (base.ok()) {
        base_ = std::move(*base);
        LayerShardedArena* l = base_.get();
        hooks_.after_update = [l] { return l->ReleaseAll(); };
        LogInfo("The frozen base is sharded per layer over %d ranks (%d units)",
                pg->world_size(), l->num_units());
      } else {
        LogWarning("fsdp_shard_frozen_base: %s; the base stays replicated",
                   std::string(base.status().message()).c_str());
      }
    }
    return DataParallelStrategy::OptimizerBuffers(params, grads);
  }

  absl::Status AttachTrainer(TransformerDecoder& model, DecoderTrainer& trainer) override {
    CCTUNE_RETURN_IF_ERROR(DataParallelStrategy::AttachTrainer(model, trainer));
    if (base_ == nullptr) return absl::OkStatus();
    LayerShardedArena* l = base_.get();
    model.set_parameter_hook([l](int stage, bool backward) { return l->BeforeStage(stage, backward); });
    trainer.set_gradient_ready_hook([l](int stage) { return l->GradientsReady(stage); });
    return absl::OkStatus();
  }

  absl::Status WholeWeights(bool whole) override {
    if (base_ == nullptr) return DataParallelStrategy::WholeWeights(whole);
    return whole ? base_->GatherAll() : base_->ReleaseAll();
  }

 private:
  bool shard_base_ = false;
  // Made by OptimizerBuffers (const in the interface; the skeleton calls it once).
  mutable std::unique_ptr<LayerShardedArena> base_;
  mutable int num_layers_ = 0;
  mutable bool tied_ = false;
};

}  // namespace

const RecipeEntry& LoRAFinetuneDistributedRecipe() {
  return FinetuneRecipeOf<LoRADataParallelStrategy>();
}

}  // namespace cctune
