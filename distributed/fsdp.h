// Sharded data parallel over a ParameterArena (ZeRO / FSDP). Two granularities:
//
//   LayerShardedArena (ZeRO-3, what full_finetune_distributed uses): the arena is cut into
//   per-layer units, each unit into N shards (equal but for the last ones, any N); each rank keeps its shards resident and
//   gathers a unit's others just before the unit is used (see the class).
//   ShardedArena (the fallback): every buffer, padded to a multiple of N, cut into N shards;
//   the weights stay whole on every rank, the whole gradient arena is reduce-scattered once
//   after the backward and the updated shards all-gathered after the step:
//
//   CCTUNE_RETURN_IF_ERROR(PadArenaForSharding(model, world_size, params));  // then build grads
//   CCTUNE_ASSIGN_OR_RETURN(ShardedArena sharded, ShardedArena::Create(pg, params, grads));
//   optimizer over sharded.OptimizerBuffers();
//   per step: backward into `grads` -> sharded.ReduceScatterGradients() -> clip over the
//   global norm -> optimizer.Step() on the shard -> sharded.AllGatherParameters().
//
// Collectives on scalars (AllReduceScalar) all-gather the values' bits and combine them in
// rank order in fp64, so every rank gets the same, exactly rounded result whatever the backend.
#ifndef CCTUNE_DISTRIBUTED_FSDP_H_
#define CCTUNE_DISTRIBUTED_FSDP_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "distributed/process_group.h"
#include "modules/module.h"
#include "modules/parameters.h"
#include "training/optim.h"

namespace cctune {

// Where rank r's shard lies in the whole: elements [r * stride, r * stride + numel).
struct ShardSpan {
  int64_t stride = 0;
  int64_t numel = 0;
};

// Elements per shard of a buffer of `numel` elements over `world_size` ranks: ceil(numel / N)
// (the buffer is padded to N * ShardNumel).
int64_t ShardNumel(int64_t numel, int world_size);

// `v` combined over every rank with `op` (kSum / kAvg in fp64, in rank order; kMax), the same
// value on every rank.
absl::StatusOr<double> AllReduceScalar(ProcessGroup& pg, double v, ReduceOp op);

// Replaces `params` (bound to `model`) with a copy whose buffers are padded to a multiple of
// `world_size` elements (zero padding), bound to `model`. No copy when they already are.
absl::Status PadArenaForSharding(Module& model, int world_size, ParameterArena& params);

class ShardedArena {
 public:
  // `params` and `grads` (f32, the same element offsets, e.g. params.layout().WithDType(kF32)
  // .PadBuffersTo(N)) must outlive it, with every buffer a multiple of pg->world_size()
  // elements: InvalidArgument naming the buffer otherwise.
  // The arenas' buffers are referenced (their storage is shared), not copied.
  static absl::StatusOr<ShardedArena> Create(ProcessGroup* pg, const ParameterArena& params,
                                             const ParameterArena& grads);

  int num_buffers() const { return static_cast<int>(shard_grads_.size()); }
  // Elements of this rank's shard of buffer `b`, and where it starts in the buffer.
  int64_t shard_numel(int b) const { return shard_grads_[b].numel(); }
  int64_t shard_offset(int b) const { return pg_->rank() * shard_numel(b); }
  // Bytes of the reduced gradient shards this rank holds.
  int64_t ShardGradientBytes() const;

  // One buffer per arena buffer: this rank's shard of the parameters (a view of `params`)
  // and its reduced-gradient shard, named as ArenaParamBuffers names the whole buffers
  // ("buffer<i>_<dtype>"), so the optimizer state names do not depend on the world size.
  std::vector<ParamBuffer> OptimizerBuffers() const;

  // Every rank's gradient arena summed into this rank's gradient shards (reduce-scatter);
  // then zeroes the gradient arena for the next step's accumulation.
  absl::Status ReduceScatterGradients();
  // Every rank's parameter shard gathered into every rank's `params` buffers.
  absl::Status AllGatherParameters();

 private:
  ShardedArena() = default;
  ProcessGroup* pg_ = nullptr;
  std::vector<Tensor> params_;  // the arenas' buffers
  std::vector<Tensor> grads_;
  std::vector<Tensor> shard_grads_;   // f32 [shard_numel]
  std::vector<Tensor> shard_params_;  // views of params_' buffers
  std::vector<Tensor> staging_;       // all-gather inputs (a copy of the shard)
};

// ZeRO-3 / FSDP's per-layer units over a decoder's arena (one buffer): unit 0 is
// tok_embeddings, unit i + 1 layers.i, unit L + 1 the rest (the final norm, the output
// projection); each unit is a contiguous range of the buffer cut into N shards of
// ceil(len / N) elements (the last ones shorter when N does not divide len: any world size
// works), and rank r owns shard r of every unit: its parameters (always resident), the reduced gradients
// and the optimizer state. The other shards of a unit are all-gathered into the arena before
// the unit is used and their pages handed back to the kernel (madvise MADV_DONTNEED on the
// CPU) when it is done, so a rank holds its shards plus the units in flight; the gradient
// arena's pages of a unit are likewise released (they read back as zeros) once its gradients
// are reduce-scattered. Stages are TransformerDecoder's (set_parameter_hook and the trainer's
// gradient-ready hook): -1 the table, i layer i, L the final norm, L + 1 the output projection.
//
// Forward: before stage s the unit is gathered (waiting for its prefetch) and the next one's
// gather started (StartAllGather), and with reshard_after_forward the previous unit is
// released. Backward: before layer i's the unit is gathered (again, after a reshard) and
// layer i-1's prefetched; once a unit's gradients are complete their reduce-scatter (a sum)
// starts and its parameters are released; the reduce-scatter overlaps the next layer's
// backward, then is added to this rank's gradient shard (micro-batches accumulate there) and
// the unit's gradient pages released. After the optimizer's update
// every unit is released (the resident copies are stale); WholeWeights gathers all of them
// (saving), ReleaseAll gives them back.
class LayerShardedArena {
 public:
  // InvalidArgument (the caller may fall back to ShardedArena) when the arena has more than
  // one buffer or a unit is not contiguous. A unit whose length N does not divide gathers
  // into a padded buffer of N * ceil(len / N) elements and reduce-scatters a padded copy of
  // its gradients (one copy each way more than an even unit).
  static absl::StatusOr<std::unique_ptr<LayerShardedArena>> Create(
      ProcessGroup* pg, const ParameterArena& params, const ParameterArena& grads,
      int num_layers, bool tied_output, bool reshard_after_forward);

  // Only the weights sharded, for a frozen base (LoRA): no gradients (GradientsReady just
  // releases the unit); `keep_resident` ([begin, end) element ranges of the buffer, e.g. the
  // adapters, which every rank holds and updates alike) are never handed back, and a gather
  // rewrites them with the owner's (identical) values.
  static absl::StatusOr<std::unique_ptr<LayerShardedArena>> CreateFrozen(
      ProcessGroup* pg, const ParameterArena& params, int num_layers, bool tied_output,
      bool reshard_after_forward, std::vector<std::pair<int64_t, int64_t>> keep_resident);

  int num_units() const { return static_cast<int>(units_.size()); }
  // One buffer per unit, "unit<u>_<dtype>": this rank's parameter shard and gradient shard.
  std::vector<ParamBuffer> OptimizerBuffers() const;
  // Where this rank's shard of each unit lies in the unit, by the names above.
  std::map<std::string, ShardSpan> ShardSpans() const;
  int64_t ShardGradientBytes() const;
  // Elements of the units' non-owned ranges resident now (for tests and logs).
  int64_t ResidentForeignElements() const;

  // The decoder's parameter hook and the trainer's gradient-ready hook.
  absl::Status BeforeStage(int stage, bool backward);
  absl::Status GradientsReady(int stage);
  // Waits for the gradients' reduce-scatters still in flight (GradientsReady finishes each
  // one at the next unit's, and all of them at the table's, the backward's last): the
  // gradient shards are then complete. ReleaseAll does it too.
  absl::Status FinishGradients();
  // Every unit gathered (and kept) / released.
  absl::Status GatherAll();
  absl::Status ReleaseAll();

 private:
  struct Unit {
    int64_t begin = 0, end = 0;  // in the buffer
    // Rank r owns unit elements [r * stride, r * stride + count_r): stride = ceil(len / N);
    // `own` and `shard` are this rank's start (in the unit) and count. `even`: N divides len
    // (every count is the stride, the collectives work in the arena itself).
    int64_t stride = 0, own = 0, shard = 0;
    bool even = true;
    bool resident = true;        // the arena holds every rank's shard now
    std::unique_ptr<Work> gather;  // in flight
    // The unit's parameters and gradients in the arenas; this rank's shard of its parameters
    // (a view) and of its reduced gradients; the all-gather's input and the reduce-scatter's
    // output.
    Tensor view, grad_view, shard_param, shard_grad, staging, reduced;
    Tensor gathered;  // an uneven unit's gather in flight: N * stride elements
    std::unique_ptr<Work> reduce;  // the gradients' reduce-scatter in flight
    Tensor rs_input;               // an uneven unit's padded gradients, while it is
  };
  LayerShardedArena() = default;
  static absl::StatusOr<std::unique_ptr<LayerShardedArena>> Make(
      ProcessGroup* pg, const ParameterArena& params, const ParameterArena* grads, int num_layers,
      bool tied_output, bool reshard_after_forward,
      std::vector<std::pair<int64_t, int64_t>> keep_resident);
  absl::Status DiscardForeign(int64_t begin, int64_t end);
  int UnitOfStage(int stage) const;
  absl::Status Acquire(int u);
  absl::Status FinishGather(Unit& x);
  absl::Status Prefetch(int u);
  absl::Status Release(int u);
  absl::Status ReduceScatter(int u);  // started
  absl::Status FinishReduceScatter(int u);
  // Every started reduce-scatter but unit `keep`'s (-1: all).
  absl::Status FinishReduceScatters(int keep);

  ProcessGroup* pg_ = nullptr;
  Tensor params_, grads_;
  int num_layers_ = 0;
  bool tied_ = false;
  bool reshard_after_forward_ = true;
  std::vector<Unit> units_;
  std::vector<int> pending_reduces_;  // units whose reduce-scatter is in flight
  bool frozen_ = false;               // CreateFrozen: no gradients
  std::vector<std::pair<int64_t, int64_t>> keep_;  // sorted ranges never handed back
};

// Resharding a 1-D tensor saved sharded at another world size: `old_shards` are the old
// ranks' shards (f32, the last ones possibly shorter: uneven units) in rank order; returns
// elements [rank * span.stride, rank * span.stride + span.numel) of their concatenation as a
// new f32 CPU tensor, zero past its end. The elements past world_size * span.stride must be
// zero (padding): InvalidArgument otherwise, and when a shard is not f32.
absl::StatusOr<Tensor> ReshardTensor(const std::vector<Tensor>& old_shards, ShardSpan span,
                                     int rank, int world_size);
// Equal shards: span {shard_numel, shard_numel}.
absl::StatusOr<Tensor> ReshardTensor(const std::vector<Tensor>& old_shards, int64_t shard_numel,
                                     int rank, int world_size);

// The optimizer state of shard `rank` of `world_size` from the states every rank of a run at
// another world size saved (`old_states`, in rank order): rank 0's name, step and
// hyperparameters, each tensor "<buffer>.<kind>" resharded (ReshardTensor) to
// `shard_numel[<buffer>]` elements. At the same world size it is `old_states[rank]`.
// InvalidArgument when the states disagree (optimizer, tensor names) or name a buffer
// `shard_numel` lacks; Unimplemented for state that is not f32 (AdamW8bit's packed codes)
// across world sizes.
absl::StatusOr<OptimizerState> ReshardOptimizerState(
    const std::vector<OptimizerState>& old_states,
    const std::map<std::string, ShardSpan>& shard_numel, int rank, int world_size);
// Equal shards of shard_numel[<buffer>] elements.
absl::StatusOr<OptimizerState> ReshardOptimizerState(
    const std::vector<OptimizerState>& old_states,
    const std::map<std::string, int64_t>& shard_numel, int rank, int world_size);

}  // namespace cctune

#endif  // CCTUNE_DISTRIBUTED_FSDP_H_
