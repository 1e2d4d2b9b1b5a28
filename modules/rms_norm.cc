#include "modules/rms_norm.h"

#include "core/status.h"
#include "kernels/ops.h"

namespace cctune {

RMSNorm::RMSNorm(int64_t dim, float eps)
    : dim_(dim), eps_(eps), scale_(RegisterParameter("scale", {dim}, ParameterInit::Ones())) {
  CCTUNE_CHECK(dim >= 0, "RMSNorm(", dim, ")");
}

absl::Status RMSNorm::Forward(Tensor& out, const Tensor& x) const {
  if (!scale_.value.defined()) {
    return absl::FailedPreconditionError(
        "RMSNorm: parameters are not materialised (create a ParameterArena first)");
  }
  return ops::RmsNorm(out, x, scale_.value, eps_);
}

absl::Status RMSNorm::AddForward(Tensor& sum, Tensor& out, const Tensor& a,
                                const Tensor& b) const {
  if (!scale_.value.defined()) {
    return absl::FailedPreconditionError(
        "RMSNorm: parameters are not materialised (create a ParameterArena first)");
  }
  return ops::AddRmsNorm(sum, out, a, b, scale_.value, eps_);
}

absl::Status RMSNorm::Backward(Tensor& dx, const Tensor& dy, const Tensor& x,
                               ActivationStore& store) const {
  return ops::RmsNormBackward(dx, store.Grad(scale_.value), dy, x, scale_.value, eps_);
}

absl::StatusOr<Tensor> RMSNorm::operator()(const Tensor& x) const {
  CCTUNE_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(x.shape(), DType::kF32, x.device()));
  CCTUNE_RETURN_IF_ERROR(Forward(out, x));
  return out;
}

}  // namespace cctune
