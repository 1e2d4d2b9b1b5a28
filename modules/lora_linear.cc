#include "modules/lora_linear.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/status.h"
#include "kernels/ops.h"

namespace cctune {

LoRALinear::LoRALinear(int64_t in_dim, int64_t out_dim, int64_t rank, double alpha,
                       double dropout, bool use_bias, bool quantize_base)
    : Linear(in_dim, out_dim, use_bias,
             quantize_base ? Nf4CodesShape(in_dim, out_dim) : Shape{out_dim, in_dim},
             quantize_base ? std::optional<DType>(DType::kI32) : std::nullopt),
      rank_(rank),
      alpha_(alpha),
      dropout_(dropout),
      nf4_(quantize_base ? std::make_unique<Nf4Weight>(in_dim, out_dim) : nullptr),
      lora_a_(in_dim, rank, false),
      lora_b_(rank, out_dim, false) {
  CCTUNE_CHECK(rank > 0, "LoRALinear: rank ", rank, " must be positive");
  CCTUNE_CHECK(dropout >= 0.0 && dropout < 1.0, "LoRALinear: dropout ", dropout);
  // lora_b starts at zero (torchtune's initialize_parameters); lora_a keeps Linear's
  // U(-1/sqrt(in), 1/sqrt(in)), which is kaiming_uniform_(a=sqrt(5)).
  lora_b_.ForEachParameter(
      [](const std::string&, Parameter& p) { p.init = ParameterInit::Zeros(); });
  RegisterModule("nf4", nf4_.get());  // null (skipped) without quantize_base
  RegisterModule("lora_a", &lora_a_);
  RegisterModule("lora_b", &lora_b_);
}

namespace {

// A temporary of `shape` and `dtype`: the store's slot for f32 when there is a store, else a
// new tensor (evaluation).
absl::StatusOr<Tensor> TempOrNew(ActivationStore* store, StoreSlot slot, const Shape& shape,
                                 DType dtype, const Device& device) {
  if (store != nullptr && dtype == DType::kF32) return store->Temp(slot, shape, device);
  return Tensor::Empty(shape, dtype, device);
}

}  // namespace

std::optional<uint64_t> LoRALinear::DropoutOffset(const ActivationStore* store,
                                                  int64_t row0) const {
  if (store == nullptr || merged_ || dropout_ == 0.0) return std::nullopt;
  const uint64_t* offset = store->DropoutOffset(this);
  if (offset == nullptr) return std::nullopt;
  return *offset + static_cast<uint64_t>(row0 * in_dim());
}

absl::Status LoRALinear::Forward(Tensor& out, const Tensor& x, ActivationStore* store,
                                 int64_t row0) const {
  if (nf4_ != nullptr) {
    CCTUNE_RETURN_IF_ERROR(nf4_->Forward(out, x, weight(), bias()));
  } else {
    CCTUNE_RETURN_IF_ERROR(Linear::Forward(out, x, store, row0));
  }
  if (merged_) return absl::OkStatus();
  const std::optional<uint64_t> drop = DropoutOffset(store, row0);
  if (!drop.has_value()) return AddAdapter(out, x, store);
  CCTUNE_ASSIGN_OR_RETURN(
      Tensor dropped, TempOrNew(store, StoreSlot::kLoraDropped, x.shape(), x.dtype(), x.device()));
  CCTUNE_RETURN_IF_ERROR(
      ops::Dropout(dropped, x, static_cast<float>(dropout_), store->dropout_seed(), *drop));
  return AddAdapter(out, dropped, store);
}

absl::Status LoRALinear::AddAdapter(Tensor& out, const Tensor& x, ActivationStore* store) const {
  Shape u_shape = x.shape();
  u_shape.back() = rank_;
  CCTUNE_ASSIGN_OR_RETURN(Tensor u,
                          TempOrNew(store, StoreSlot::kLoraU, u_shape, DType::kF32, x.device()));
  CCTUNE_RETURN_IF_ERROR(lora_a_.Forward(u, x));
  CCTUNE_RETURN_IF_ERROR(ops::Scale(u, u, static_cast<float>(scale())));
  Shape o_shape = x.shape();
  o_shape.back() = out_dim();
  CCTUNE_ASSIGN_OR_RETURN(
      Tensor delta, TempOrNew(store, StoreSlot::kLoraDelta, o_shape, out.dtype(), x.device()));
  CCTUNE_RETURN_IF_ERROR(lora_b_.Forward(delta, u));
  return ops::Add(out, out, delta);
}

absl::Status LoRALinear::Backward(Tensor* dx, const Tensor& dy, const Tensor& x,
                                  ActivationStore& store, int64_t row0) const {
  if (nf4_ != nullptr) {
    CCTUNE_RETURN_IF_ERROR(nf4_->Backward(dx, dy, weight(), bias(), store));
  } else {
    CCTUNE_RETURN_IF_ERROR(Linear::Backward(dx, dy, x, store, row0));
  }
  if (merged_) return absl::OkStatus();
  // y += s · B (A x): with us = s · A x,  dB += dyᵀ us;  du = s · dy B;  dA += duᵀ x;
  // dx += du A. Every temporary is [rows, rank].
  //
  // With dropout the adapter reads xd = D x (D: the mask times 1/(1-p), diagonal), so
  // dA += duᵀ xd and dx += D (du A). The mask is regenerated here from the step's (seed,
  // offset) rather than saved by the forward: saving would keep one [b·s, in] tensor per
  // adapter alive from the forward to the backward (seven per layer, 6·d + f floats per token
  // per layer, more than all the activations kept now, and it would defeat activation
  // checkpointing), while regenerating costs one elementwise Philox pass per adapter, small
  // next to its GEMMs; xd lives only inside this call.
  const Tensor& a = lora_a_.weight();
  const Tensor& b = lora_b_.weight();
  Tensor* da = store.Grad(a);
  Tensor* dbw = store.Grad(b);
  if (dx == nullptr && da == nullptr && dbw == nullptr) return absl::OkStatus();
  const std::optional<uint64_t> drop = DropoutOffset(&store, row0);
  const float p = static_cast<float>(dropout_);
  const Device& dev = x.device();
  Tensor xa = x;  // the adapter's input
  if (drop.has_value()) {
    CCTUNE_ASSIGN_OR_RETURN(xa, store.Temp(StoreSlot::kLoraDropped, x.shape(), dev));
    CCTUNE_RETURN_IF_ERROR(ops::Dropout(xa, x, p, store.dropout_seed(), *drop));
  }
  Shape u_shape = x.shape();
  u_shape.back() = rank_;
  CCTUNE_ASSIGN_OR_RETURN(Tensor us, store.Temp(StoreSlot::kLoraU, u_shape, dev));
  CCTUNE_RETURN_IF_ERROR(ops::Linear(us, xa, a));
  const float s = static_cast<float>(scale());
  CCTUNE_RETURN_IF_ERROR(ops::Scale(us, us, s));
  CCTUNE_ASSIGN_OR_RETURN(Tensor du, store.ZeroTemp(StoreSlot::kLoraDu, u_shape, dev));
  CCTUNE_RETURN_IF_ERROR(ops::LinearBackward(&du, dbw, nullptr, dy, us, b));
  if (dx == nullptr && da == nullptr) return absl::OkStatus();
  CCTUNE_RETURN_IF_ERROR(ops::Scale(du, du, s));
  if (!drop.has_value()) return ops::LinearBackward(dx, da, nullptr, du, x, a);
  if (dx == nullptr) return ops::LinearBackward(nullptr, da, nullptr, du, xa, a);
  // dx += D (du A), through a zeroed temporary that the mask is applied to in place.
  CCTUNE_ASSIGN_OR_RETURN(Tensor dxa, store.ZeroTemp(StoreSlot::kLoraDx, x.shape(), dev));
  CCTUNE_RETURN_IF_ERROR(ops::LinearBackward(&dxa, da, nullptr, du, xa, a));
  CCTUNE_RETURN_IF_ERROR(ops::Dropout(dxa, dxa, p, store.dropout_seed(), *drop));
  return ops::Add(*dx, *dx, dxa);
}

absl::Status LoRALinear::Merge() {
  if (merged_) return absl::OkStatus();
  if (nf4_ != nullptr) {
    return absl::FailedPreconditionError(
        "LoRALinear::Merge: the base weight is NF4 (QLoRA); merge into the dequantized weights");
  }
  const Tensor& w = weight();
  if (!w.defined() || w.device().is_meta()) {
    return absl::FailedPreconditionError("LoRALinear::Merge: parameters are not materialised");
  }
  const int64_t in = in_dim(), out = out_dim(), r = rank_;
  CCTUNE_ASSIGN_OR_RETURN(std::vector<double> wv, w.ToDoubleVector());
  CCTUNE_ASSIGN_OR_RETURN(std::vector<double> av, lora_a_.weight().ToDoubleVector());
  CCTUNE_ASSIGN_OR_RETURN(std::vector<double> bv, lora_b_.weight().ToDoubleVector());
  const double s = scale();
  std::vector<float> merged(static_cast<size_t>(out * in));
#pragma omp parallel for
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) {
      double acc = 0.0;
      for (int64_t k = 0; k < r; ++k) acc += bv[o * r + k] * av[k * in + i];
      merged[o * in + i] = static_cast<float>(wv[o * in + i] + s * acc);
    }
  }
  CCTUNE_ASSIGN_OR_RETURN(Tensor m, Tensor::FromVector(merged, {out, in}));
  Tensor w_mut = w;  // a view sharing the arena's storage
  CCTUNE_RETURN_IF_ERROR(w_mut.CopyFrom(m));
  merged_ = true;
  return absl::OkStatus();
}

}  // namespace cctune
