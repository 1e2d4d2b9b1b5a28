#include "modules/linear.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "kernels/ops.h"

namespace cctune {

absl::StatusOr<Tensor> Projection::operator()(const Tensor& x) const {
  if (x.dim() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Projection: input must have at least 1 dim, got ", ShapeToString(x.shape())));
  }
  Shape shape = x.shape();
  shape.back() = out_dim();
  CCTUNE_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(std::move(shape), DType::kF32, x.device()));
  CCTUNE_RETURN_IF_ERROR(Forward(out, x));
  return out;
}

Linear::Linear(int64_t in_dim, int64_t out_dim, bool bias)
    : Linear(in_dim, out_dim, bias, {out_dim, in_dim}, std::nullopt) {}

namespace {

// nn.Linear's U(-1/sqrt(in), 1/sqrt(in)) for a plain weight; zeros for a stored form.
ParameterInit LinearInit(int64_t in_dim, const std::optional<DType>& stored) {
  if (stored.has_value()) return ParameterInit::Zeros();
  return ParameterInit::Uniform(1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(in_dim, 1))));
}

}  // namespace

Linear::Linear(int64_t in_dim, int64_t out_dim, bool bias, Shape weight_shape,
               std::optional<DType> weight_dtype)
    : in_dim_(in_dim),
      out_dim_(out_dim),
      weight_(RegisterParameter("weight", std::move(weight_shape), LinearInit(in_dim, weight_dtype),
                                weight_dtype)) {
  CCTUNE_CHECK(in_dim >= 0 && out_dim >= 0, "Linear(", in_dim, ", ", out_dim, ")");
  if (bias) bias_ = &RegisterParameter("bias", {out_dim}, LinearInit(in_dim, weight_dtype));
}

absl::Status Linear::Forward(Tensor& out, const Tensor& x, ActivationStore* /*store*/,
                             int64_t /*row0*/) const {
  if (!weight_.value.defined()) {
    return absl::FailedPreconditionError(
        "Linear: parameters are not materialised (create a ParameterArena first)");
  }
  return ops::Linear(out, x, weight_.value, bias());
}

absl::Status Linear::Backward(Tensor* dx, const Tensor& dy, const Tensor& x,
                              ActivationStore& store, int64_t /*row0*/) const {
  Tensor* dw = store.Grad(weight_.value);
  Tensor* db = bias_ != nullptr ? store.Grad(bias_->value) : nullptr;
  if (dx == nullptr && dw == nullptr && db == nullptr) return absl::OkStatus();
  return ops::LinearBackward(dx, dw, db, dy, x, weight_.value);
}

}  // namespace cctune
