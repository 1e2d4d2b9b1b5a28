#include "modules/tied_linear.h"

#include "core/status.h"
#include "kernels/ops.h"

namespace cctune {

TiedLinear::TiedLinear(const Embedding* tied) : tied_(tied) {
  CCTUNE_CHECK(tied != nullptr, "TiedLinear needs an Embedding");
}

absl::Status TiedLinear::Forward(Tensor& out, const Tensor& x, ActivationStore* /*store*/,
                                 int64_t /*row0*/) const {
  if (!tied_->weight().defined()) {
    return absl::FailedPreconditionError(
        "TiedLinear: the tied embedding is not materialised (create a ParameterArena first)");
  }
  return ops::Linear(out, x, tied_->weight());
}

absl::Status TiedLinear::Backward(Tensor* dx, const Tensor& dy, const Tensor& x,
                                  ActivationStore& store, int64_t /*row0*/) const {
  return ops::LinearBackward(dx, store.Grad(tied_->weight()), nullptr, dy, x, tied_->weight());
}

}  // namespace cctune
