// QLoRA's frozen NF4 base: torchtune's FrozenNF4Linear (a Linear whose weight torchao's to_nf4
// holds in 4-bit NormalFloat, kernels/cpu/nf4.h) and the NF4 storage LoRALinear uses with
// quantize_base (modules/lora_linear.h). The weight is never dequantized whole: Forward and
// the dx of Backward dequantize a panel per thread on the fly (kernels/cpu/nf4_linear.h);
// there is no weight gradient. Embeddings, norms and biases stay in the run's dtype.
//
// Parameters of an in -> out projection with n = in · out elements (torchao's NF4Tensor
// fields; fixed dtypes, whatever the run's):
//   weight                       i32 [out, in / 8] quantized_data: two 4-bit codes per byte
//   nf4.quantized_scalers        i32 [n / 256]     the int8 block scales, four per i32
//   nf4.quantization_factor      f32 [n / 16384]   one per group of 256 blocks
//   nf4.scaler_mean              f32 [1]
//   bias (if any)                run dtype [out]
// 0.516 byte per weight element: Nf4Bytes(n). n must be a multiple of 16384 (torchao's), in of 8.
// A checkpoint's full-precision [out, in] weight goes in through Nf4Weight::Quantize
// (models/qlora.h does it for a whole model while loading).
#ifndef CCTUNE_MODULES_NF4_LINEAR_H_
#define CCTUNE_MODULES_NF4_LINEAR_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "kernels/cpu/nf4.h"
#include "modules/activation_store.h"
#include "modules/linear.h"
#include "modules/module.h"

namespace cctune {

// InvalidArgument naming `what` unless an in -> out weight can be held in NF4.
absl::Status CheckNf4Shape(int64_t in_dim, int64_t out_dim, const std::string& what);
// The shape of the codes ("weight") of an in -> out NF4 projection: {out, in / 8}.
Shape Nf4CodesShape(int64_t in_dim, int64_t out_dim);

// The scales of one NF4 weight (the child "nf4" of its projection); the codes are the
// projection's own "weight" parameter, passed in.
class Nf4Weight : public Module {
 public:
  Nf4Weight(int64_t in_dim, int64_t out_dim);

  int64_t in_dim() const { return in_dim_; }
  int64_t out_dim() const { return out_dim_; }
  // The kernel's view of codes + these scales; FailedPrecondition before an arena binds them,
  // Unimplemented off the CPU.
  absl::StatusOr<cpu::Nf4View> View(const Tensor& codes) const;

  // out [..., out] f32 = x [..., in] f32 · dequant(W)ᵀ (+ bias); contiguous.
  absl::Status Forward(Tensor& out, const Tensor& x, const Tensor& codes, const Tensor* bias) const;
  // dx [..., in] f32 += dy [..., out] f32 · dequant(W) (dx may be null), and the bias's
  // gradient if the store has one for it; never a weight gradient.
  absl::Status Backward(Tensor* dx, const Tensor& dy, const Tensor& codes, const Tensor* bias,
                        ActivationStore& store) const;
  // Quantizes `w` (f32/bf16/f16 [out, in], contiguous, on the CPU) into codes and these scales
  // (the arena's storage). `what` names the tensor in errors.
  absl::Status Quantize(const Tensor& codes, const Tensor& w, const std::string& what) const;
  // The dequantized weight [out, in] in `dtype` (f32 or bf16), a new CPU tensor.
  absl::StatusOr<Tensor> Dequantize(const Tensor& codes, DType dtype) const;

 private:
  int64_t in_dim_;
  int64_t out_dim_;
  Parameter& quantized_scalers_;
  Parameter& quantization_factor_;
  Parameter& scaler_mean_;
};

// torchtune's FrozenNF4Linear: y = x · dequant(W)ᵀ (+ b), frozen (no weight gradient; a bias
// gradient only if the trainer asks for one).
class FrozenNF4Linear : public Linear {
 public:
  FrozenNF4Linear(int64_t in_dim, int64_t out_dim, bool bias = false);

  const Nf4Weight& nf4() const { return nf4_; }

  using Projection::Forward;
  absl::Status Forward(Tensor& out, const Tensor& x, ActivationStore* store,
                       int64_t row0) const override;
  absl::Status Backward(Tensor* dx, const Tensor& dy, const Tensor& x, ActivationStore& store,
                        int64_t row0) const override;

 private:
  Nf4Weight nf4_;
};

// The kernel's view of an NF4 weight from its four tensors (a state dict's or arena's
// <layer>.weight and <layer>.nf4.*): InvalidArgument naming `what` on dtypes or sizes that do
// not fit, FailedPrecondition if not materialised, Unimplemented off the CPU.
absl::StatusOr<cpu::Nf4View> Nf4ViewOf(const Tensor& codes, const Tensor& quantized_scalers,
                                       const Tensor& quantization_factor,
                                       const Tensor& scaler_mean, const std::string& what);
// Quantizes `w` (f32/bf16/f16 [out, in], contiguous, CPU) into the four tensors' storage.
absl::Status QuantizeNf4Tensors(const Tensor& w, const Tensor& codes,
                                const Tensor& quantized_scalers,
                                const Tensor& quantization_factor, const Tensor& scaler_mean,
                                const std::string& what);
// The dequantized weight [out, in] (codes are [out, in / 8]) in `dtype` (f32 or bf16), new.
absl::StatusOr<Tensor> DequantizeNf4Tensor(const cpu::Nf4View& w, const Shape& codes_shape,
                                           DType dtype);

}  // namespace cctune

#endif  // CCTUNE_MODULES_NF4_LINEAR_H_
