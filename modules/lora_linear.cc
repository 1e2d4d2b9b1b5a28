#include "modules/lora_linear.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/status.h"
#include "kernels/ops.h"

namespace cctune {

LoRALinear::LoRALinear(int64_t in_dim, int64_t out_dim, int64_t rank, double alpha,
                       double dropout, bool use_bias)
    : Linear(in_dim, out_dim, use_bias),
      rank_(rank),
      alpha_(alpha),
      dropout_(dropout),
      lora_a_(in_dim, rank, false),
      lora_b_(rank, out_dim, false) {
  CCTUNE_CHECK(rank > 0, "LoRALinear: rank ", rank, " must be positive");
  CCTUNE_CHECK(dropout >= 0.0 && dropout < 1.0, "LoRALinear: dropout ", dropout);
  // lora_b starts at zero (torchtune's initialize_parameters); lora_a keeps Linear's
  // U(-1/sqrt(in), 1/sqrt(in)), which is kaiming_uniform_(a=sqrt(5)).
  lora_b_.ForEachParameter(
      [](const std::string&, Parameter& p) { p.init = ParameterInit::Zeros(); });
  RegisterModule("lora_a", &lora_a_);
  RegisterModule("lora_b", &lora_b_);
}

absl::Status LoRALinear::Forward(Tensor& out, const Tensor& x) const {
  CCTUNE_RETURN_IF_ERROR(Linear::Forward(out, x));
  if (merged_) return absl::OkStatus();
  return AddAdapter(out, x);
}

absl::Status LoRALinear::ForwardWithDropout(Tensor& out, const Tensor& x, uint64_t seed,
                                            uint64_t offset) const {
  if (merged_ || dropout_ == 0.0) return Forward(out, x);
  CCTUNE_RETURN_IF_ERROR(Linear::Forward(out, x));
  CCTUNE_ASSIGN_OR_RETURN(Tensor dropped, Tensor::Empty(x.shape(), x.dtype(), x.device()));
  CCTUNE_RETURN_IF_ERROR(ops::Dropout(dropped, x, static_cast<float>(dropout_), seed, offset));
  return AddAdapter(out, dropped);
}

absl::Status LoRALinear::AddAdapter(Tensor& out, const Tensor& x) const {
  Shape u_shape = x.shape();
  u_shape.back() = rank_;
  CCTUNE_ASSIGN_OR_RETURN(Tensor u, Tensor::Empty(u_shape, DType::kF32, x.device()));
  CCTUNE_RETURN_IF_ERROR(lora_a_.Forward(u, x));
  CCTUNE_RETURN_IF_ERROR(ops::Scale(u, u, static_cast<float>(scale())));
  Shape o_shape = x.shape();
  o_shape.back() = out_dim();
  CCTUNE_ASSIGN_OR_RETURN(Tensor delta, Tensor::Empty(o_shape, out.dtype(), x.device()));
  CCTUNE_RETURN_IF_ERROR(lora_b_.Forward(delta, u));
  return ops::Add(out, out, delta);
}

absl::Status LoRALinear::Merge() {
  if (merged_) return absl::OkStatus();
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
