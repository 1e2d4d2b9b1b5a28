// QuantizedLinear: a Linear whose weight is stored int8 (one scale per output channel) or
// int4 (a scale and a zero point per group of `groupsize` inputs), as torchtune's
// Int8WeightOnlyQuantizer / Int4WeightOnlyQuantizer leave nn.Linear layers (weight-only: the
// activations stay f32). Inference only: Backward is an error. Formats and packing:
// kernels/cpu/quant/quant.h; docs/generation.md, "Quantized models".
//
// Parameters (names beside the layer's, dtypes fixed whatever the run's dtype):
//   int8: weight  i32 [out, Int8RowBytes(in) / 4]   the int8 rows, four per i32, little-endian
//         scales  f32 [out]
//   int4: weight  i32 [out, Int4RowBytes(in) / 4]   the packed nibble blocks, eight per i32
//         scales  bf16 [out, ceil(in / groupsize)]
//         zeros   bf16 [out, ceil(in / groupsize)]
//   bias (if any) in the run's dtype, [out].
#ifndef CCTUNE_MODULES_QUANTIZED_LINEAR_H_
#define CCTUNE_MODULES_QUANTIZED_LINEAR_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "kernels/cpu/quant/quant.h"
#include "modules/linear.h"

namespace cctune {

// Which quantizer, with its one setting.
struct WeightQuantization {
  cpu::QuantFormat format = cpu::QuantFormat::kInt8PerChannel;
  int64_t groupsize = 0;  // int4 only: 32..256, a multiple of 32

  // "Int8WeightOnlyQuantizer" / "Int4WeightOnlyQuantizer" (torchtune's class names).
  std::string QuantizerName() const;
  // torchtune's quantization mode strings, "8w" and "4w" (the quantize recipe's file suffix).
  std::string Mode() const;
  bool operator==(const WeightQuantization& o) const {
    return format == o.format && (format != cpu::QuantFormat::kInt4Grouped || groupsize == o.groupsize);
  }
  bool operator!=(const WeightQuantization& o) const { return !(*this == o); }
};

// Shapes of the quantized parameters of an in -> out projection.
Shape QuantizedWeightShape(const WeightQuantization& q, int64_t in_dim, int64_t out_dim);
Shape QuantizedScalesShape(const WeightQuantization& q, int64_t in_dim, int64_t out_dim);

class QuantizedLinear : public Linear {
 public:
  QuantizedLinear(int64_t in_dim, int64_t out_dim, bool bias, const WeightQuantization& q);

  const WeightQuantization& quantization() const { return q_; }
  const Tensor& scales() const { return scales_.value; }
  const Tensor* zeros() const { return zeros_ != nullptr ? &zeros_->value : nullptr; }
  // The kernel's view of the materialised weight.
  cpu::QuantMatrix Matrix() const;

  // out [..., out] f32 = x [..., in] f32 · dequant(W)ᵀ (+ bias), on the CPU; x and out
  // contiguous. Other dtypes, devices or layouts: InvalidArgument / Unimplemented naming them.
  using Projection::Forward;
  absl::Status Forward(Tensor& out, const Tensor& x, ActivationStore* store,
                       int64_t row0) const override;
  // Unimplemented: a quantized model is for inference.
  absl::Status Backward(Tensor* dx, const Tensor& dy, const Tensor& x, ActivationStore& store,
                        int64_t row0) const override;

 private:
  WeightQuantization q_;
  Parameter& scales_;
  Parameter* zeros_ = nullptr;
};

}  // namespace cctune

#endif  // CCTUNE_MODULES_QUANTIZED_LINEAR_H_
