#include "modules/nf4_linear.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "kernels/cpu/nf4_linear.h"
#include "kernels/ops.h"

namespace cctune {

namespace {

// Rows of a [..., d] contiguous f32 tensor; InvalidArgument unless it is one.
absl::StatusOr<int64_t> F32Rows(const Tensor& t, int64_t d, const char* what) {
  if (t.dtype() != DType::kF32 || t.dim() < 1 || t.shape().back() != d || !t.is_contiguous() ||
      !t.device().is_cpu()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NF4 linear: ", what, " must be contiguous f32 [..., ", d, "] on the CPU, got ",
        DTypeName(t.dtype()), " ", ShapeToString(t.shape()), " on ", t.device().ToString()));
  }
  return t.numel() / std::max<int64_t>(d, 1);
}

absl::Status CheckMaterialised(const Tensor& t, const std::string& what) {
  if (!t.defined() || t.device().is_meta()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "NF4 linear ", what, ": parameters are not materialised (create a ParameterArena first)"));
  }
  if (!t.device().is_cpu()) {
    return absl::UnimplementedError(absl::StrCat("NF4 linear ", what, ": runs on the CPU only, got ",
                                                 t.device().ToString()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckNf4Shape(int64_t in_dim, int64_t out_dim, const std::string& what) {
  const int64_t n = in_dim * out_dim;
  if (n <= 0 || n % cpu::kNf4GroupSize != 0 || in_dim % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NF4: ", what, " [", out_dim, ", ", in_dim, "] has ", n, " elements; torchao's NF4 ",
        "(block_size ", cpu::kNf4BlockSize, ", scaler_block_size ", cpu::kNf4ScalerBlockSize,
        ") needs a positive multiple of ", cpu::kNf4GroupSize, " (and in_dim a multiple of 8)"));
  }
  return absl::OkStatus();
}

Shape Nf4CodesShape(int64_t in_dim, int64_t out_dim) { return {out_dim, in_dim / 8}; }

absl::StatusOr<cpu::Nf4View> Nf4ViewOf(const Tensor& codes, const Tensor& quantized_scalers,
                                       const Tensor& quantization_factor,
                                       const Tensor& scaler_mean, const std::string& what) {
  for (const Tensor* t : {&codes, &quantized_scalers, &quantization_factor, &scaler_mean}) {
    CCTUNE_RETURN_IF_ERROR(CheckMaterialised(*t, what));
  }
  const int64_t n = codes.numel() * 8;
  if (codes.dtype() != DType::kI32 || quantized_scalers.dtype() != DType::kI32 ||
      quantization_factor.dtype() != DType::kF32 || scaler_mean.dtype() != DType::kF32 ||
      n % cpu::kNf4GroupSize != 0 || quantized_scalers.numel() * 4 != n / cpu::kNf4BlockSize ||
      quantization_factor.numel() != n / cpu::kNf4GroupSize || scaler_mean.numel() != 1 ||
      !codes.is_contiguous() || !quantized_scalers.is_contiguous() ||
      !quantization_factor.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NF4 ", what, ": the codes (", DTypeName(codes.dtype()), " ", ShapeToString(codes.shape()),
        "), quantized_scalers (", DTypeName(quantized_scalers.dtype()), " ",
        ShapeToString(quantized_scalers.shape()), "), quantization_factor (",
        DTypeName(quantization_factor.dtype()), " ", ShapeToString(quantization_factor.shape()),
        ") and scaler_mean (", ShapeToString(scaler_mean.shape()),
        ") do not make an NF4 tensor (i32 n/8, i32 n/256, f32 n/16384, f32 [1])"));
  }
  cpu::Nf4View v;
  v.numel = n;
  v.codes = static_cast<const uint8_t*>(codes.raw_data());
  v.quantized_scalers = static_cast<const int8_t*>(quantized_scalers.raw_data());
  v.quantization_factor = quantization_factor.data<float>();
  v.scaler_mean = *scaler_mean.data<float>();
  return v;
}

absl::Status QuantizeNf4Tensors(const Tensor& w, const Tensor& codes,
                                const Tensor& quantized_scalers,
                                const Tensor& quantization_factor, const Tensor& scaler_mean,
                                const std::string& what) {
  CCTUNE_ASSIGN_OR_RETURN(cpu::Nf4View v, Nf4ViewOf(codes, quantized_scalers, quantization_factor,
                                                   scaler_mean, what));
  if (w.dim() != 2 || w.size(0) != codes.size(0) || w.size(1) != codes.size(1) * 8 ||
      !w.is_contiguous() || !w.device().is_cpu()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NF4: ", what, " must be a contiguous CPU [", codes.size(0), ", ", codes.size(1) * 8,
        "] tensor to quantize, got ", ShapeToString(w.shape()), " on ", w.device().ToString()));
  }
  const cpu::Nf4MutableView out{v.numel, const_cast<uint8_t*>(v.codes),
                                const_cast<int8_t*>(v.quantized_scalers),
                                const_cast<float*>(v.quantization_factor),
                                scaler_mean.data<float>()};
  switch (w.dtype()) {
    case DType::kF32:
      return cpu::QuantizeNf4Into(w.data<float>(), w.numel(), what, out);
    case DType::kBF16:
      return cpu::QuantizeNf4Into(w.data<bf16>(), w.numel(), what, out);
    case DType::kF16:
      return cpu::QuantizeNf4Into(w.data<f16>(), w.numel(), what, out);
    default:
      return absl::InvalidArgumentError(absl::StrCat("NF4: ", what, " is ", DTypeName(w.dtype()),
                                                     "; only f32, bf16 or f16 quantize"));
  }
}

absl::StatusOr<Tensor> DequantizeNf4Tensor(const cpu::Nf4View& w, const Shape& codes_shape,
                                           DType dtype) {
  CCTUNE_CHECK(codes_shape.size() == 2 && codes_shape[0] * codes_shape[1] * 8 == w.numel,
               "DequantizeNf4Tensor: codes shape ", ShapeToString(codes_shape));
  const Shape shape = {codes_shape[0], codes_shape[1] * 8};
  CCTUNE_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(shape, dtype));
  if (dtype == DType::kF32) {
    cpu::DequantizeNf4(w, out.data<float>());
  } else if (dtype == DType::kBF16) {
    cpu::DequantizeNf4(w, out.data<bf16>());
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("NF4: dequantizes to f32 or bf16, not ", DTypeName(dtype)));
  }
  return out;
}

Nf4Weight::Nf4Weight(int64_t in_dim, int64_t out_dim)
    : in_dim_(in_dim),
      out_dim_(out_dim),
      quantized_scalers_(RegisterParameter("quantized_scalers",
                                           {in_dim * out_dim / cpu::kNf4BlockSize / 4},
                                           ParameterInit::Zeros(), DType::kI32)),
      quantization_factor_(RegisterParameter("quantization_factor",
                                             {in_dim * out_dim / cpu::kNf4GroupSize},
                                             ParameterInit::Ones(), DType::kF32)),
      scaler_mean_(RegisterParameter("scaler_mean", {1}, ParameterInit::Zeros(), DType::kF32)) {
  CCTUNE_CHECK_OK(CheckNf4Shape(in_dim, out_dim, "weight"));
}

absl::StatusOr<cpu::Nf4View> Nf4Weight::View(const Tensor& codes) const {
  return Nf4ViewOf(codes, quantized_scalers_.value, quantization_factor_.value,
                   scaler_mean_.value, "weight");
}

absl::Status Nf4Weight::Forward(Tensor& out, const Tensor& x, const Tensor& codes,
                                const Tensor* bias) const {
  CCTUNE_ASSIGN_OR_RETURN(const cpu::Nf4View w, View(codes));
  CCTUNE_ASSIGN_OR_RETURN(const int64_t m, F32Rows(x, in_dim_, "x"));
  CCTUNE_ASSIGN_OR_RETURN(const int64_t mo, F32Rows(out, out_dim_, "out"));
  if (m != mo) {
    return absl::InvalidArgumentError(absl::StrCat("NF4 linear: x ", ShapeToString(x.shape()),
                                                   " and out ", ShapeToString(out.shape()),
                                                   " have different row counts"));
  }
  cpu::Nf4LinearForward(m, out_dim_, in_dim_, x.data<float>(), w, out.data<float>());
  if (bias != nullptr) return ops::Add(out, out, *bias);
  return absl::OkStatus();
}

absl::Status Nf4Weight::Backward(Tensor* dx, const Tensor& dy, const Tensor& codes,
                                 const Tensor* bias, ActivationStore& store) const {
  if (bias != nullptr) {
    if (Tensor* db = store.Grad(*bias); db != nullptr) {
      CCTUNE_RETURN_IF_ERROR(ops::AddBackward(nullptr, db, dy));
    }
  }
  if (dx == nullptr) return absl::OkStatus();
  CCTUNE_ASSIGN_OR_RETURN(const cpu::Nf4View w, View(codes));
  CCTUNE_ASSIGN_OR_RETURN(const int64_t m, F32Rows(dy, out_dim_, "dy"));
  CCTUNE_ASSIGN_OR_RETURN(const int64_t mx, F32Rows(*dx, in_dim_, "dx"));
  if (m != mx) {
    return absl::InvalidArgumentError(absl::StrCat("NF4 linear: dy ", ShapeToString(dy.shape()),
                                                   " and dx ", ShapeToString(dx->shape()),
                                                   " have different row counts"));
  }
  cpu::Nf4LinearBackwardDx(m, out_dim_, in_dim_, dy.data<float>(), w, dx->data<float>());
  return absl::OkStatus();
}

absl::Status Nf4Weight::Quantize(const Tensor& codes, const Tensor& w,
                                 const std::string& what) const {
  return QuantizeNf4Tensors(w, codes, quantized_scalers_.value, quantization_factor_.value,
                            scaler_mean_.value, what);
}

absl::StatusOr<Tensor> Nf4Weight::Dequantize(const Tensor& codes, DType dtype) const {
  CCTUNE_ASSIGN_OR_RETURN(const cpu::Nf4View w, View(codes));
  return DequantizeNf4Tensor(w, codes.shape(), dtype);
}

FrozenNF4Linear::FrozenNF4Linear(int64_t in_dim, int64_t out_dim, bool bias)
    : Linear(in_dim, out_dim, bias, Nf4CodesShape(in_dim, out_dim), DType::kI32),
      nf4_(in_dim, out_dim) {
  RegisterModule("nf4", &nf4_);
}

absl::Status FrozenNF4Linear::Forward(Tensor& out, const Tensor& x, ActivationStore* /*store*/,
                                      int64_t /*row0*/) const {
  return nf4_.Forward(out, x, weight(), bias());
}

absl::Status FrozenNF4Linear::Backward(Tensor* dx, const Tensor& dy, const Tensor& /*x*/,
                                       ActivationStore& store, int64_t /*row0*/) const {
  return nf4_.Backward(dx, dy, weight(), bias(), store);
}

}  // namespace cctune
