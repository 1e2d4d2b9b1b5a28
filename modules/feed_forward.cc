#include "modules/feed_forward.h"

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "kernels/ops.h"

namespace cctune {

absl::StatusOr<std::unique_ptr<FeedForward>> FeedForward::Create(std::unique_ptr<Linear> gate_proj,
                                                                 std::unique_ptr<Linear> down_proj,
                                                                 std::unique_ptr<Linear> up_proj) {
  if (gate_proj == nullptr || down_proj == nullptr || up_proj == nullptr) {
    return absl::InvalidArgumentError("FeedForward: gate_proj, down_proj and up_proj are required");
  }
  const int64_t d = gate_proj->in_dim(), f = gate_proj->out_dim();
  if (up_proj->in_dim() != d || up_proj->out_dim() != f || down_proj->in_dim() != f ||
      down_proj->out_dim() != d) {
    return absl::InvalidArgumentError(
        absl::StrCat("FeedForward: gate_proj is ", d, " -> ", f, ", up_proj ", up_proj->in_dim(),
                     " -> ", up_proj->out_dim(), ", down_proj ", down_proj->in_dim(), " -> ",
                     down_proj->out_dim(), "; expected d -> f, d -> f and f -> d"));
  }
  return std::unique_ptr<FeedForward>(
      new FeedForward(std::move(gate_proj), std::move(down_proj), std::move(up_proj)));
}

FeedForward::FeedForward(std::unique_ptr<Linear> w1, std::unique_ptr<Linear> w2,
                         std::unique_ptr<Linear> w3)
    : w1_(std::move(w1)), w2_(std::move(w2)), w3_(std::move(w3)) {
  RegisterModule("w1", w1_.get());
  RegisterModule("w2", w2_.get());
  RegisterModule("w3", w3_.get());
}

absl::Status FeedForward::Forward(Tensor& out, const Tensor& x, Activations* acts,
                                  ActivationStore* store) {
  if (x.dim() < 1 || x.size(-1) != dim()) {
    return absl::InvalidArgumentError(
        absl::StrCat("FeedForward: x must be [..., ", dim(), "], got ", ShapeToString(x.shape())));
  }
  Shape hidden_shape = x.shape();
  hidden_shape.back() = hidden_dim();
  const Device& dev = x.device();
  // Training keeps gate, up and their product for the backward; otherwise the product
  // overwrites gate in the forward's scratch.
  Tensor gate, up, act;
  if (acts != nullptr) {
    CCTUNE_RETURN_IF_ERROR(EnsureF32(acts->gate, hidden_shape, dev));
    CCTUNE_RETURN_IF_ERROR(EnsureF32(acts->up, hidden_shape, dev));
    CCTUNE_RETURN_IF_ERROR(EnsureF32(acts->act, hidden_shape, dev));
    acts->x = x;
    gate = acts->gate;
    up = acts->up;
    act = acts->act;
  } else {
    CCTUNE_ASSIGN_OR_RETURN(gate, scratch_.Get(0, hidden_shape, DType::kF32, dev));
    CCTUNE_ASSIGN_OR_RETURN(up, scratch_.Get(1, hidden_shape, DType::kF32, dev));
    act = gate;
  }
  CCTUNE_RETURN_IF_ERROR(w1_->Forward(gate, x, store, 0));  // [..., f]
  CCTUNE_RETURN_IF_ERROR(w3_->Forward(up, x, store, 0));    // [..., f]
  CCTUNE_RETURN_IF_ERROR(ops::SiluMul(act, gate, up));
  return w2_->Forward(out, act, store, 0);  // [..., d]
}

absl::Status FeedForward::Backward(Tensor& dx, const Tensor& dy, const Activations& a,
                                   ActivationStore& store) const {
  const Device& dev = dy.device();
  const Shape& hidden_shape = a.act.shape();
  CCTUNE_ASSIGN_OR_RETURN(Tensor dact, store.ZeroTemp(StoreSlot::kFfDact, hidden_shape, dev));
  CCTUNE_RETURN_IF_ERROR(w2_->Backward(&dact, dy, a.act, store, 0));
  CCTUNE_ASSIGN_OR_RETURN(Tensor dgate, store.ZeroTemp(StoreSlot::kFfDgate, hidden_shape, dev));
  CCTUNE_ASSIGN_OR_RETURN(Tensor dup, store.ZeroTemp(StoreSlot::kFfDup, hidden_shape, dev));
  CCTUNE_RETURN_IF_ERROR(ops::SiluMulBackward(dgate, dup, dact, a.gate, a.up));
  CCTUNE_RETURN_IF_ERROR(w1_->Backward(&dx, dgate, a.x, store, 0));
  return w3_->Backward(&dx, dup, a.x, store, 0);
}

absl::StatusOr<Tensor> FeedForward::operator()(const Tensor& x) {
  CCTUNE_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(x.shape(), DType::kF32, x.device()));
  CCTUNE_RETURN_IF_ERROR(Forward(out, x));
  return out;
}

}  // namespace cctune
