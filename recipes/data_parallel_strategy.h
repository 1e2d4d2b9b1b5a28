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

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "config/node.h"
#include "config/schema.h"
#include "distributed/process_group.h"
#include "distributed/timed_process_group.h"
#include "recipes/finetune_recipe.h"
#include "training/train_step.h"

namespace cctune {

class DataParallelStrategy : public StrategyDecorator {
 public:
  DataParallelStrategy(std::unique_ptr<FinetuneStrategy> inner, FinetuneRecipeDocs docs)
      : StrategyDecorator(std::move(inner)), docs_(docs) {}
  // Logs (rank 0) how long the training thread was blocked in collectives since training
  // started: the exposed communication.
  ~DataParallelStrategy() override;

  FinetuneRecipeDocs docs() const override { return docs_; }
  void ExtendSchema(Schema& schema) const override;
  void Validate(const ConfigNode& root, std::vector<ConfigError>* errors) const override;
  // The inner strategy's, then the process group (rank > 0 logs warnings and errors only).
  absl::Status Configure(const ConfigNode& root) override;
  ProcessGroup* Group() override { return timed_.get(); }
  // The hooks. Tests only: with $CCTUNE_TEST_SIGKILL_AT_STEP=R:K rank R SIGKILLs itself
  // after the optimizer update of the K-th step this process trains; with R:K:save, in the
  // save after that step, once the weights are gathered (TestKillPoint).
  const DataParallelHooks* DataParallel() const override;

 protected:
  ProcessGroup& pg() const { return *timed_; }
  // Where a save has gathered the weights: the R:K:save kill point of
  // $CCTUNE_TEST_SIGKILL_AT_STEP (a no-op otherwise).
  void TestKillPoint(const char* where) const;
  bool reshard_after_forward() const { return reshard_after_forward_; }
  // sum_over_ranks is set by Configure; the subclass sets the rest (from OptimizerBuffers,
  // const in the interface: the skeleton calls it once, before any step).
  mutable DataParallelHooks hooks_;

 private:
  FinetuneRecipeDocs docs_;
  std::unique_ptr<ProcessGroup> pg_;
  std::unique_ptr<TimedProcessGroup> timed_;  // over pg_: what the recipe uses
  mutable bool timing_ = false;               // since DataParallel(), before the first step
  mutable double timing_start_ = 0;           // steady clock, seconds
  bool reshard_after_forward_ = true;
  int kill_rank_ = -1;       // $CCTUNE_TEST_SIGKILL_AT_STEP
  int64_t kill_step_ = 0;
  std::string kill_where_ = "step";
  mutable bool kill_hook_added_ = false;
  mutable int64_t steps_done_ = 0;
};

}  // namespace cctune

#endif  // CCTUNE_RECIPES_DATA_PARALLEL_STRATEGY_H_
