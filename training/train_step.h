// One optimizer step of a TransformerDecoder, llm.c style: zero the gradient arena, forward
// and backward over the micro-batches (gradient accumulation, each normalised by the step's
// total number of valid labels so the sum is the whole batch's mean-loss gradient), clip by
// global norm, then the optimizer's update. Device-generic: the model, gradient arena and
// optimizer state may live on cuda:N; micro-batches stay on the host (the trainer copies them
// over), and the step reads back the loss once per micro-batch and the gradient norm once.
//
//   CCTUNE_ASSIGN_OR_RETURN(auto trainer, DecoderTrainer::Create(model, &grads));
//   CCTUNE_ASSIGN_OR_RETURN(auto opt, AdamW::Create(ArenaParamBuffers(params, grads), {}));
//   CCTUNE_ASSIGN_OR_RETURN(TrainStepResult r, TrainStep(*trainer, *opt, micro_batches, 1.0));
#ifndef CCTUNE_TRAINING_TRAIN_STEP_H_
#define CCTUNE_TRAINING_TRAIN_STEP_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/tensor.h"
#include "modules/parameters.h"
#include "training/decoder_trainer.h"
#include "training/optim.h"

namespace cctune {

// One micro-batch. tokens/labels: i32/i64 [b, s] (labels already shifted, -100 ignored);
// mask (bool [b, s, s]) and input_pos ([b, s] or [s]) are used when defined (packing).
struct MicroBatch {
  Tensor tokens;
  Tensor labels;
  Tensor mask;
  Tensor input_pos;
};

struct TrainStepResult {
  double loss = 0.0;       // mean cross-entropy over every valid label of the step
  int64_t num_tokens = 0;  // valid labels of the step
  double grad_norm = 0.0;  // global L2 norm of the gradients before clipping
  // Host wall-clock seconds (profiling): the micro-batches' forwards (to the final norm), the
  // rest of their forward-backward (output projection, loss, backward), and the gradient
  // hook + norm + clipping + optimizer update.
  double forward_seconds = 0.0;
  double backward_seconds = 0.0;
  double optimizer_seconds = 0.0;
};

// The optimizer buffers for a parameter arena and its f32 gradient arena (same layout), buffer
// by buffer. Unimplemented when the buffers do not pair up (a model mixing dtypes, whose f32
// gradient arena has a single buffer); InvalidArgument when the sizes differ.
absl::StatusOr<std::vector<ParamBuffer>> ArenaParamBuffers(const ParameterArena& params,
                                                           const ParameterArena& grads);

// Processing of a step's gradients (the optimizer's Grads()) after the backward and before
// the norm, clipping and update: e.g. a reduce-scatter across ranks. An error ends the step.
using GradientHook = std::function<absl::Status(const std::vector<Tensor>& grads)>;

// What a data-parallel step adds (recipes/*_distributed.cc): every rank runs TrainStep on its
// own micro-batches, and the step is that of the union of the ranks' batches.
struct DataParallelHooks {
  // The sum over every rank of this rank's value, the same on every rank: the step's valid
  // labels (the gradients are normalised by the global count, so the summed gradients are
  // the global batch's mean-loss gradient), the loss sums and, with sharded_gradients, the
  // gradients' squared norms. Required.
  std::function<absl::StatusOr<double>(double)> sum_over_ranks;
  // Sums the ranks' gradients (all-reduce, or reduce-scatter into this rank's shard, which
  // the optimizer's Grads() then are), after the backward and `after_backward`.
  GradientHook reduce_gradients;
  // The optimizer's Grads() are this rank's shard of the gradients: the norm that is reported
  // and clipped to is over every rank's shard.
  bool sharded_gradients = false;
  // After the optimizer's update, e.g. gathers the updated parameter shards (null: none).
  std::function<absl::Status()> after_update;
};

// Zeroes the optimizer's gradients, runs trainer.ForwardBackward on every micro-batch, runs
// `after_backward` (when set), clips the gradients to max_grad_norm (no clipping when <= 0;
// the norm is still reported) and steps the optimizer, whose gradient buffers must be the
// trainer's gradient arena. InvalidArgument when the step has no valid label;
// FailedPrecondition, with no update made, when the loss or the gradient norm is not finite.
// With `data_parallel`: as described there; the result's loss, num_tokens and grad_norm are
// the global ones (the same on every rank); not with optimizer_in_bwd.
absl::StatusOr<TrainStepResult> TrainStep(DecoderTrainer& trainer, Optimizer& optimizer,
                                          absl::Span<const MicroBatch> micro_batches,
                                          double max_grad_norm,
                                          const GradientHook& after_backward = nullptr,
                                          const DataParallelHooks* data_parallel = nullptr);

}  // namespace cctune

#endif  // CCTUNE_TRAINING_TRAIN_STEP_H_
