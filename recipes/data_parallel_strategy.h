// What the distributed fine-tune recipes share (recipes/full_finetune_distributed.h,
// recipes/lora_finetune_distributed.h): a StrategyDecorator over a single-device strategy
// that runs it data parallel. Configure reads the launcher's environment (OpenMPI, Slurm or
// torchrun variables, distributed/process_group.h) and creates the process group; the
// skeleton (recipes/finetune_recipe.h) then gives each rank its shard of the dataset, sums the
// step's tokens, losses and gradients over the ranks (DataParallel()), and lets rank 0 alone
// log and write the consolidated weights. Started without a launcher it is a world of one
// (the "single" group): the single-device run.
//
// Keys it adds (torchtune's full_finetune_distributed / lora_finetune_distributed):
// fsdp_reshard_after_forward, fsdp_cpu_offload (false only), custom_sharded_layers
// (accepted), distributed_backend, distributed_timeout_seconds.
#ifndef CCTUNE_RECIPES_DATA_PARALLEL_STRATEGY_H_
#define CCTUNE_RECIPES_DATA_PARALLEL_STRATEGY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "config/node.h"
#include "config/schema.h"
#include "distributed/process_group.h"
#include "recipes/finetune_recipe.h"
#include "training/train_step.h"

namespace cctune {

class DataParallelStrategy : public StrategyDecorator {
 public:
  DataParallelStrategy(std::unique_ptr<FinetuneStrategy> inner, FinetuneRecipeDocs docs)
      : StrategyDecorator(std::move(inner)), docs_(docs) {}

  FinetuneRecipeDocs docs() const override { return docs_; }
  void ExtendSchema(Schema& schema) const override;
  void Validate(const ConfigNode& root, std::vector<ConfigError>* errors) const override;
  // The inner strategy's, then the process group (rank > 0 logs warnings and errors only).
  absl::Status Configure(const ConfigNode& root) override;
  ProcessGroup* Group() override { return pg_.get(); }
  const DataParallelHooks* DataParallel() const override { return &hooks_; }

 protected:
  ProcessGroup& pg() const { return *pg_; }
  bool reshard_after_forward() const { return reshard_after_forward_; }
  // sum_over_ranks is set by Configure; the subclass sets the rest (from OptimizerBuffers,
  // const in the interface: the skeleton calls it once, before any step).
  mutable DataParallelHooks hooks_;

 private:
  FinetuneRecipeDocs docs_;
  std::unique_ptr<ProcessGroup> pg_;
  bool reshard_after_forward_ = true;
};

}  // namespace cctune

#endif  // CCTUNE_RECIPES_DATA_PARALLEL_STRATEGY_H_
