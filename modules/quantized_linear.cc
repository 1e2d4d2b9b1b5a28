#include "modules/quantized_linear.h"

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace cctune {

using cpu::QuantFormat;

std::string WeightQuantization::QuantizerName() const {
  return format == QuantFormat::kInt8PerChannel ? "Int8WeightOnlyQuantizer"
                                                : "Int4WeightOnlyQuantizer";
}

std::string WeightQuantization::Mode() const {
  return format == QuantFormat::kInt8PerChannel ? "8w" : "4w";
}

Shape QuantizedWeightShape(const WeightQuantization& q, int64_t in_dim, int64_t out_dim) {
  const int64_t bytes = q.format == QuantFormat::kInt8PerChannel ? cpu::Int8RowBytes(in_dim)
                                                                 : cpu::Int4RowBytes(in_dim);
  return {out_dim, bytes / 4};
}

Shape QuantizedScalesShape(const WeightQuantization& q, int64_t in_dim, int64_t out_dim) {
  if (q.format == QuantFormat::kInt8PerChannel) return {out_dim};
  return {out_dim, cpu::Int4Groups(in_dim, q.groupsize)};
}

QuantizedLinear::QuantizedLinear(int64_t in_dim, int64_t out_dim, bool bias,
                                 const WeightQuantization& q)
    : Linear(in_dim, out_dim, bias, QuantizedWeightShape(q, in_dim, out_dim), DType::kI32),
      q_(q),
      scales_(RegisterParameter(
          "scales", QuantizedScalesShape(q, in_dim, out_dim), ParameterInit::Ones(),
          q.format == QuantFormat::kInt8PerChannel ? DType::kF32 : DType::kBF16)) {
  if (q.format == QuantFormat::kInt4Grouped) {
    CCTUNE_CHECK(q.groupsize >= cpu::kMinInt4GroupSize && q.groupsize <= cpu::kMaxInt4GroupSize &&
                     q.groupsize % cpu::kInt4BlockSize == 0,
                 "QuantizedLinear: groupsize ", q.groupsize);
    zeros_ = &RegisterParameter("zeros", QuantizedScalesShape(q, in_dim, out_dim),
                                ParameterInit::Zeros(), DType::kBF16);
  }
}

cpu::QuantMatrix QuantizedLinear::Matrix() const {
  cpu::QuantMatrix m;
  m.format = q_.format;
  m.n = out_dim();
  m.k = in_dim();
  m.groupsize = q_.groupsize;
  m.data = static_cast<const uint8_t*>(weight().raw_data());
  if (q_.format == QuantFormat::kInt8PerChannel) {
    m.scales = scales_.value.data<float>();
  } else {
    m.scales4 = scales_.value.data<bf16>();
    m.zeros4 = zeros_->value.data<bf16>();
  }
  return m;
}

absl::Status QuantizedLinear::Forward(Tensor& out, const Tensor& x, ActivationStore* /*store*/,
                                      int64_t /*row0*/) const {
  if (!weight().defined() || weight().device().is_meta()) {
    return absl::FailedPreconditionError(
        "QuantizedLinear: parameters are not materialised (create a ParameterArena first)");
  }
  if (!x.device().is_cpu() || !out.device().is_cpu() || !weight().device().is_cpu()) {
    return absl::UnimplementedError(absl::StrCat(
        "QuantizedLinear (", q_.QuantizerName(), "): runs on the CPU only, got x on ",
        x.device().ToString(), ", weight on ", weight().device().ToString()));
  }
  if (x.dtype() != DType::kF32 || out.dtype() != DType::kF32 || x.dim() < 1 ||
      x.shape().back() != in_dim() || out.dim() < 1 || out.shape().back() != out_dim() ||
      out.numel() / out_dim() != x.numel() / std::max<int64_t>(in_dim(), 1) ||
      !x.is_contiguous() || !out.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "QuantizedLinear: x must be contiguous f32 [..., ", in_dim(), "] and out contiguous f32 "
        "[..., ", out_dim(), "], got x ", DTypeName(x.dtype()), " ", ShapeToString(x.shape()),
        ", out ", DTypeName(out.dtype()), " ", ShapeToString(out.shape())));
  }
  const int64_t m = out.numel() / std::max<int64_t>(out_dim(), 1);
  float* y = out.data<float>();
  cpu::QuantGemmNT(m, x.data<float>(), in_dim(), Matrix(), y, out_dim());
  if (const Tensor* b = bias(); b != nullptr) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < out_dim(); ++j) {
        y[i * out_dim() + j] += b->dtype() == DType::kBF16 ? Bf16ToFloat(b->data<bf16>()[j])
                                : b->dtype() == DType::kF16 ? F16ToFloat(b->data<f16>()[j])
                                                            : b->data<float>()[j];
      }
    }
  }
  return absl::OkStatus();
}

absl::Status QuantizedLinear::Backward(Tensor* /*dx*/, const Tensor& /*dy*/, const Tensor& /*x*/,
                                       ActivationStore& /*store*/, int64_t /*row0*/) const {
  return absl::UnimplementedError(absl::StrCat(
      "QuantizedLinear (", q_.QuantizerName(), ") has no backward: a weight-only quantized model "
      "is for inference (quantize after training)"));
}

}  // namespace cctune
