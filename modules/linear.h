// Linear: y = x · Wᵀ (+ b), with W stored [out_dim, in_dim] as PyTorch's nn.Linear does.
// Also the Projection interface shared with TiedLinear, so a decoder's output layer can be
// either.
#ifndef CCTUNE_MODULES_LINEAR_H_
#define CCTUNE_MODULES_LINEAR_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "modules/activation_store.h"
#include "modules/module.h"

namespace cctune {

// Anything that maps [..., in_dim] to [..., out_dim] the way a Linear layer does.
class Projection : public Module {
 public:
  virtual int64_t in_dim() const = 0;
  virtual int64_t out_dim() const = 0;
  // out: [..., out_dim] (f32, bf16 or f16) = f(x [..., in_dim]), in every mode. A training
  // forward passes its store (LoRA adapters then apply the step's dropout); x holds rows
  // [row0, ...) of the layer's input (the output projection runs by row chunks), which places
  // them in a dropout mask.
  virtual absl::Status Forward(Tensor& out, const Tensor& x, ActivationStore* store,
                               int64_t row0) const = 0;
  absl::Status Forward(Tensor& out, const Tensor& x) const { return Forward(out, x, nullptr, 0); }
  // The backward of out = f(x): dx += dy · ∂f/∂x (dx may be null) and the parameter gradients
  // += into the store's views (frozen parameters get none). dy: [..., out_dim] f32; x, row0:
  // as the forward saw them.
  virtual absl::Status Backward(Tensor* dx, const Tensor& dy, const Tensor& x,
                                ActivationStore& store, int64_t row0) const = 0;
  // A new f32 output on x's device.
  absl::StatusOr<Tensor> operator()(const Tensor& x) const;
};

class Linear : public Projection {
 public:
  // Parameters "weight" [out_dim, in_dim] and, with `bias`, "bias" [out_dim]; both initialised
  // U(-1/sqrt(in_dim), 1/sqrt(in_dim)) by InitializeRandom, as nn.Linear does.
  Linear(int64_t in_dim, int64_t out_dim, bool bias = false);

  int64_t in_dim() const override { return in_dim_; }
  int64_t out_dim() const override { return out_dim_; }
  bool has_bias() const { return bias_ != nullptr; }
  const Tensor& weight() const { return weight_.value; }  // [out_dim, in_dim]
  const Tensor* bias() const { return bias_ != nullptr ? &bias_->value : nullptr; }

  using Projection::Forward;
  absl::Status Forward(Tensor& out, const Tensor& x, ActivationStore* store,
                       int64_t row0) const override;
  absl::Status Backward(Tensor* dx, const Tensor& dy, const Tensor& x, ActivationStore& store,
                        int64_t row0) const override;

 protected:
  // For subclasses that store the weight in another form (modules/quantized_linear.h,
  // modules/nf4_linear.h): "weight" is declared with `weight_shape` and `weight_dtype` (then
  // zero-initialised, as is the bias) instead of [out_dim, in_dim]. With no dtype this is the
  // public constructor.
  Linear(int64_t in_dim, int64_t out_dim, bool bias, Shape weight_shape,
         std::optional<DType> weight_dtype);

 private:
  int64_t in_dim_;
  int64_t out_dim_;
  Parameter& weight_;
  Parameter* bias_ = nullptr;
};

}  // namespace cctune

#endif  // CCTUNE_MODULES_LINEAR_H_
