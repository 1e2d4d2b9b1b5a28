// RMSNorm over the last dim: x / sqrt(mean(x²) + eps) * scale (torchtune's RMSNorm).
#ifndef CCTUNE_MODULES_RMS_NORM_H_
#define CCTUNE_MODULES_RMS_NORM_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "modules/activation_store.h"
#include "modules/module.h"

namespace cctune {

class RMSNorm : public Module {
 public:
  // Parameter "scale" [dim], initialised to ones. torchtune's default eps is 1e-6.
  explicit RMSNorm(int64_t dim, float eps = 1e-6f);

  int64_t dim() const { return dim_; }
  float eps() const { return eps_; }
  const Tensor& scale() const { return scale_.value; }  // [dim]

  // out [..., dim] = rmsnorm(x [..., dim]); out may be x itself.
  absl::Status Forward(Tensor& out, const Tensor& x) const;
  // sum = a + b and out = rmsnorm(sum) in one pass (ops::AddRmsNorm): a decoder layer's
  // residual add and its next norm. Bit-identical to Add then Forward.
  absl::Status AddForward(Tensor& sum, Tensor& out, const Tensor& a, const Tensor& b) const;
  // dx += d(rmsnorm)/dx · dy and scale's gradient += (unless frozen); x is the forward's input.
  absl::Status Backward(Tensor& dx, const Tensor& dy, const Tensor& x,
                        ActivationStore& store) const;
  // A new f32 output on x's device.
  absl::StatusOr<Tensor> operator()(const Tensor& x) const;

 private:
  int64_t dim_;
  float eps_;
  Parameter& scale_;
};

}  // namespace cctune

#endif  // CCTUNE_MODULES_RMS_NORM_H_
