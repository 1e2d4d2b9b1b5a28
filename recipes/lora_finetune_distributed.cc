#include "recipes/lora_finetune_distributed.h"

#include <memory>
#include <vector>

#include "core/log.h"
#include "core/status.h"
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
             "LoRA fine-tune on N ranks, adapter gradients all-reduced, base replicated "
             "(recipes/lora_finetune_distributed)",
             "checkpoints (step_<N>/: adapter, merged weights, state; LATEST) and logs",
             "LoRA model builder (torchtune.models.*.lora_*)",
             "base weights (HF or llama2.c); null: random init from seed"}) {}

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
    return DataParallelStrategy::OptimizerBuffers(params, grads);
  }
};

}  // namespace

const RecipeEntry& LoRAFinetuneDistributedRecipe() {
  return FinetuneRecipeOf<LoRADataParallelStrategy>();
}

}  // namespace cctune
