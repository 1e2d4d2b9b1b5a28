#include "training/train_step.h"

#include <chrono>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/status.h"
#include "kernels/cpu/gemm/gemm.h"
#include "kernels/cpu/op_profile.h"
#include "training/optimizer_in_backward.h"

namespace cctune {

absl::StatusOr<std::vector<ParamBuffer>> ArenaParamBuffers(const ParameterArena& params,
                                                           const ParameterArena& grads) {
  const std::vector<Tensor>& p = params.buffers();
  const std::vector<Tensor>& g = grads.buffers();
  if (p.size() != g.size()) {
    return absl::UnimplementedError(absl::StrCat(
        "ArenaParamBuffers: the parameter arena has ", p.size(), " buffers and the gradient arena ",
        g.size(), " (models that mix parameter dtypes are not supported yet)"));
  }
  // The optimizer pairs parameter i with gradient i, so every parameter must sit at the same
  // element offset in both (bf16 and f32 layouts pad differently).
  const auto& pe = params.layout().entries();
  const auto& ge = grads.layout().entries();
  if (pe.size() != ge.size()) {
    return absl::InvalidArgumentError(absl::StrCat("ArenaParamBuffers: ", pe.size(),
                                                   " parameters but ", ge.size(), " gradients"));
  }
  for (size_t k = 0; k < pe.size(); ++k) {
    if (pe[k].spec.name != ge[k].spec.name || pe[k].buffer != ge[k].buffer ||
        pe[k].offset != ge[k].offset || pe[k].numel != ge[k].numel) {
      return absl::UnimplementedError(absl::StrCat(
          "ArenaParamBuffers: parameter ", pe[k].spec.name, " (buffer ", pe[k].buffer,
          ", offset ", pe[k].offset, ") and gradient ", ge[k].spec.name, " (buffer ",
          ge[k].buffer, ", offset ", ge[k].offset,
          ") are not at the same place; the layouts must pad alike"));
    }
  }
  std::vector<ParamBuffer> out;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i].numel() != g[i].numel() || g[i].dtype() != DType::kF32) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ArenaParamBuffers: buffer ", i, " has ", p[i].numel(), " parameters but its gradient ",
          g[i].numel(), " elements of ", DTypeName(g[i].dtype()), " (want f32)"));
    }
    out.push_back({absl::StrCat("buffer", i, "_", DTypeName(p[i].dtype())), p[i], g[i]});
  }
  return out;
}

absl::StatusOr<TrainStepResult> TrainStep(DecoderTrainer& trainer, Optimizer& optimizer,
                                          absl::Span<const MicroBatch> micro_batches,
                                          double max_grad_norm,
                                          const GradientHook& after_backward,
                                          const DataParallelHooks* data_parallel) {
  // Batch-invariant GEMMs: each row computes the same whatever the rows per call, so a step on
  // N ranks of 1/N of the batch matches one rank's (kernels/cpu/gemm/gemm.h).
  const cpu::ScopedBatchInvariantGemm batch_invariant;
  TrainStepResult result;
  for (const MicroBatch& mb : micro_batches) {
    CCTUNE_ASSIGN_OR_RETURN(int64_t n, CountValidLabels(mb.labels));
    result.num_tokens += n;
  }
  const DataParallelHooks* dp = data_parallel;
  if (dp != nullptr) {
    if (optimizer.UpdatesInBackward()) {
      return absl::UnimplementedError(
          "TrainStep: optimizer_in_bwd is not supported by the data-parallel recipes");
    }
    CCTUNE_ASSIGN_OR_RETURN(const double total,
                            dp->sum_over_ranks(static_cast<double>(result.num_tokens)));
    result.num_tokens = static_cast<int64_t>(total);
  }
  if (result.num_tokens == 0) {
    return absl::InvalidArgumentError(absl::StrCat("TrainStep: the ", micro_batches.size(),
                                                   " micro-batches have no label that is not -100"));
  }
  if (optimizer.UpdatesInBackward()) {
    // The updates run inside the backward (training/optimizer_in_backward.h), torchtune's
    // rules and messages.
    if (max_grad_norm > 0) {
      return absl::InvalidArgumentError(
          "Gradient clipping is not supported with optimizer in bwd. Please set "
          "clip_grad_norm=None, or optimizer_in_bwd=False.");
    }
    if (micro_batches.size() != 1) {
      return absl::InvalidArgumentError(
          "Gradient accumulation is not supported with optimizer in bwd. Please set "
          "gradient_accumulation_steps=1, or optimizer_in_bwd=False.");
    }
    if (after_backward) {
      return absl::UnimplementedError(
          "TrainStep: a gradient hook cannot run with optimizer_in_bwd (the gradients are "
          "applied and freed during the backward)");
    }
  }
  CCTUNE_RETURN_IF_ERROR(optimizer.ZeroGrad());
  double loss_sum = 0.0;
  for (const MicroBatch& mb : micro_batches) {
    CCTUNE_ASSIGN_OR_RETURN(
        LossSum l, trainer.ForwardBackward(mb.tokens, mb.labels,
                                           mb.mask.defined() ? &mb.mask : nullptr,
                                           mb.input_pos.defined() ? &mb.input_pos : nullptr,
                                           static_cast<double>(result.num_tokens)));
    loss_sum += l.loss_sum;
    result.forward_seconds += l.forward_seconds;
    result.backward_seconds += l.rest_seconds;
  }
  const auto t_opt = std::chrono::steady_clock::now();
  if (dp != nullptr) {
    CCTUNE_ASSIGN_OR_RETURN(loss_sum, dp->sum_over_ranks(loss_sum));
  }
  // The norm, clip and update ops below count as the optimizer in the step profile.
  const cpu::ScopedOpCategory profile_as(cpu::OpCategory::kOptimizer);
  result.loss = loss_sum / static_cast<double>(result.num_tokens);
  if (const auto* in_bwd = dynamic_cast<const OptimizerInBackward*>(&optimizer)) {
    result.grad_norm = in_bwd->grad_norm();
    if (!std::isfinite(result.loss)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "TrainStep: non-finite loss (", result.loss, ") at optimizer step ", optimizer.step(),
          " (optimizer_in_bwd: the parameters were already updated)"));
    }
    CCTUNE_RETURN_IF_ERROR(optimizer.Step());
    result.optimizer_seconds = 0;  // inside backward_seconds
    return result;
  }
  const std::vector<Tensor> grads = optimizer.Grads();
  if (after_backward) CCTUNE_RETURN_IF_ERROR(after_backward(grads));
  if (dp != nullptr) {
    if (dp->reduce_gradients) CCTUNE_RETURN_IF_ERROR(dp->reduce_gradients(grads));
    CCTUNE_ASSIGN_OR_RETURN(result.grad_norm, GradNorm(grads));
    if (dp->sharded_gradients) {
      CCTUNE_ASSIGN_OR_RETURN(const double sq,
                              dp->sum_over_ranks(result.grad_norm * result.grad_norm));
      result.grad_norm = std::sqrt(sq);
    }
    if (max_grad_norm > 0) {
      CCTUNE_RETURN_IF_ERROR(ClipGradsToNorm(grads, result.grad_norm, max_grad_norm));
    }
  } else if (max_grad_norm > 0) {
    CCTUNE_ASSIGN_OR_RETURN(result.grad_norm, ClipGradNorm(grads, max_grad_norm));
  } else {
    CCTUNE_ASSIGN_OR_RETURN(result.grad_norm, GradNorm(grads));
  }
  if (!std::isfinite(result.loss) || !std::isfinite(result.grad_norm)) {
    return absl::FailedPreconditionError(
        absl::StrCat("TrainStep: non-finite loss (", result.loss, ") or gradient norm (",
                     result.grad_norm, ") at optimizer step ", optimizer.step(),
                     "; no update was made"));
  }
  CCTUNE_RETURN_IF_ERROR(optimizer.Step());
  if (dp != nullptr && dp->after_update) CCTUNE_RETURN_IF_ERROR(dp->after_update());
  result.optimizer_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_opt).count();
  return result;
}

}  // namespace cctune
