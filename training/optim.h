// Optimizers over flat parameter buffers (llm.c style): each ParamBuffer is one contiguous
// parameter arena buffer and its f32 gradient buffer, and Step() is one fused update over all
// of it (ops::AdamWUpdate / ops::SgdUpdate: on the CPU an OpenMP + SIMD loop, on CUDA one
// kernel). Element-wise updates, so the result does not depend on the thread count, and a
// resumed run continues bit-identically.
//
// The buffers may live on any one device (CPU or CUDA): the optimizer allocates its state
// (moments, master copies) on that device, and ExportState's views stay there (checkpoint
// writers such as SaveRecipeState copy them to the host; ImportState accepts tensors on any
// device and copies them in).
//
//   AdamW  torch.optim.AdamW (decoupled weight decay, bias correction, amsgrad=False)
//   Sgd    torch.optim.SGD (momentum, dampening, nesterov, L2 weight decay)
//
// bf16 parameters get an f32 master copy in the optimizer: the step updates the master and
// writes the rounded bf16 value back into the parameter buffer. The state (moments, master
// copies, step count, hyperparameters) is exported by name for checkpoints:
//   "<buffer>.exp_avg", "<buffer>.exp_avg_sq", "<buffer>.momentum_buffer", "<buffer>.master".
//
//   CCTUNE_ASSIGN_OR_RETURN(auto opt, AdamW::Create({{"params", arena_buf, grad_buf}}, {}));
//   opt->set_lr(schedule.Lr(base_lr, opt->step()));
//   CCTUNE_ASSIGN_OR_RETURN(double norm, ClipGradNorm(opt->Grads(), max_norm));
//   CCTUNE_RETURN_IF_ERROR(opt->Step());
//   CCTUNE_RETURN_IF_ERROR(opt->ZeroGrad());
#ifndef CCTUNE_TRAINING_OPTIM_H_
#define CCTUNE_TRAINING_OPTIM_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "checkpoint/state_dict.h"
#include "core/tensor.h"

namespace cctune {

struct ParamBuffer {
  std::string name;  // prefixes the state tensor names ("params", "bf16", ...)
  Tensor param;      // contiguous f32 or bf16, any shape (used flat); updated in place
  Tensor grad;       // contiguous f32 with param's element count, on param's device
};

struct OptimizerState {
  std::string name;                               // "adamw" / "sgd"
  int64_t step = 0;                               // optimizer steps taken
  std::map<std::string, double> hyperparameters;  // lr, beta1, ... (bools as 0/1)
  // 1-D, named "<buffer>.<kind>", on the buffers' device: f32, or i32 words of packed 8-bit
  // codes (AdamW8bit, training/adamw8bit.h), restored only from i32 of the same size.
  StateDict tensors;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  virtual const char* name() const = 0;
  // One update of every buffer with lr(); then step() counts it.
  virtual absl::Status Step() = 0;

  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  int64_t step() const { return step_; }
  const std::vector<ParamBuffer>& buffers() const { return buffers_; }
  // The gradient buffers, for ClipGradNorm / all-reduce.
  std::vector<Tensor> Grads() const;
  // Zeroes every gradient buffer.
  virtual absl::Status ZeroGrad();
  // True when the updates run during the backward (OptimizerInBackward, optimizer_in_bwd):
  // Step() then only counts the step.
  virtual bool UpdatesInBackward() const { return false; }

  // The state as views of the optimizer's buffers (valid until the next Step()), plus the
  // step count and hyperparameters.
  virtual OptimizerState ExportState() const = 0;
  // Restores a state exported by the same kind of optimizer over buffers with the same names
  // and sizes: hyperparameters (lr included), step, and tensor contents (converted to f32).
  // bf16 parameters are rewritten from their restored master copies. Errors name the tensor
  // or hyperparameter and the values; on error nothing is changed.
  virtual absl::Status ImportState(const OptimizerState& state) = 0;
  // Bytes held by the optimizer state.
  virtual int64_t StateBytes() const;

 protected:
  Optimizer(std::vector<ParamBuffer> buffers, double lr) : buffers_(std::move(buffers)), lr_(lr) {}
  // Checks names, dtypes, contiguity, devices (all on one device) and sizes of the buffers.
  static absl::Status CheckBuffers(const std::vector<ParamBuffer>& buffers, const char* who);
  // Common part of ImportState: name, hyperparameter keys, tensor names and sizes.
  absl::Status CheckImport(const OptimizerState& state,
                           const std::vector<std::string>& hyperparameter_names) const;
  // Adds "<buffer>.master" views for bf16 buffers.
  void ExportMasters(StateDict* tensors) const;
  // Allocates (and fills from the bf16 parameters) the master copies.
  absl::Status InitMasters();
  // Copies state tensors into this optimizer's buffers (after CheckImport succeeded).
  absl::Status CopyStateTensors(const StateDict& from);
  // Buffer i's f32 master copy (bf16 params), or null.
  Tensor* Master(size_t i);

  std::vector<ParamBuffer> buffers_;
  std::vector<Tensor> masters_;  // per buffer; undefined for f32 parameters
  double lr_;
  int64_t step_ = 0;
  // name -> state tensor (exp_avg, ...), filled by subclasses; masters are added separately.
  std::map<std::string, Tensor> state_;
  // A 0 on the buffers' device (non-CPU), for ZeroGrad; made on first use.
  Tensor device_zero_;
};

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

class AdamW final : public Optimizer {
 public:
  // InvalidArgument (naming the value) for lr < 0, eps < 0, betas outside [0, 1),
  // weight_decay < 0, or bad buffers.
  static absl::StatusOr<std::unique_ptr<AdamW>> Create(std::vector<ParamBuffer> buffers,
                                                       const AdamWOptions& options);
  const char* name() const override { return "adamw"; }
  absl::Status Step() override;
  OptimizerState ExportState() const override;
  absl::Status ImportState(const OptimizerState& state) override;
  const AdamWOptions& options() const { return options_; }

 private:
  AdamW(std::vector<ParamBuffer> buffers, const AdamWOptions& options)
      : Optimizer(std::move(buffers), options.lr), options_(options) {}
  AdamWOptions options_;  // lr lives in Optimizer::lr_
};

struct SgdOptions {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
};

class Sgd final : public Optimizer {
 public:
  // As torch: nesterov needs momentum > 0 and dampening == 0.
  static absl::StatusOr<std::unique_ptr<Sgd>> Create(std::vector<ParamBuffer> buffers,
                                                     const SgdOptions& options);
  const char* name() const override { return "sgd"; }
  absl::Status Step() override;
  OptimizerState ExportState() const override;
  absl::Status ImportState(const OptimizerState& state) override;
  const SgdOptions& options() const { return options_; }

 private:
  Sgd(std::vector<ParamBuffer> buffers, const SgdOptions& options)
      : Optimizer(std::move(buffers), options.lr), options_(options) {}
  SgdOptions options_;
};

// The global L2 norm of all gradients (contiguous f32, any device), accumulated in double by
// ops::SquaredNorm in an order fixed by the sizes: the same bits for any thread count.
absl::StatusOr<double> GradNorm(absl::Span<const Tensor> grads);

// torch.nn.utils.clip_grad_norm_(norm_type=2): scales every gradient by
// min(1, max_norm / (norm + 1e-6)) and returns the norm before clipping. A non-finite norm
// leaves the gradients unchanged (the caller decides what to do: it is returned as is).
absl::StatusOr<double> ClipGradNorm(absl::Span<const Tensor> grads, double max_norm);
// The same scaling for a norm computed elsewhere (data parallel: over every rank's shard).
absl::Status ClipGradsToNorm(absl::Span<const Tensor> grads, double norm, double max_norm);

}  // namespace cctune

#endif  // CCTUNE_TRAINING_OPTIM_H_
