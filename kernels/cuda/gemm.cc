#include "kernels/cuda/gemm.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/kernels.h"

namespace cctune {
namespace cuda {
namespace {

constexpr int kMaxDevices = 16;

// One handle per device, created on first use and kept for the process (cuBLAS handles must
// not be destroyed after the runtime shuts down).
absl::StatusOr<cublasHandle_t> Handle(int index) {
  static std::mutex mu;
  static cublasHandle_t handles[kMaxDevices] = {};
  if (index < 0 || index >= kMaxDevices) {
    return absl::InvalidArgumentError(absl::StrCat("cuBLAS: device index ", index));
  }
  std::lock_guard<std::mutex> lock(mu);
  if (handles[index] == nullptr) {
    CCTUNE_RETURN_IF_ERROR(UseDevice(index));
    cublasHandle_t h = nullptr;
    CCTUNE_CUBLAS_RETURN_IF_ERROR(cublasCreate(&h));
    // Keep f32 GEMMs in true f32 (no TF32) so CUDA results track the CPU reference.
    CCTUNE_CUBLAS_RETURN_IF_ERROR(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
    handles[index] = h;
  }
  return handles[index];
}

cudaDataType_t CudaType(DType t) {
  switch (t) {
    case DType::kBF16:
      return CUDA_R_16BF;
    case DType::kF16:
      return CUDA_R_16F;
    default:
      return CUDA_R_32F;
  }
}

// A matrix operand: its last two dims as a BLAS matrix plus one stride over the batch dims.
struct Mat {
  Tensor t;  // the tensor actually read or written (maybe a converted copy)
  bool row_major = true;
  int64_t ld = 1;
  int64_t batch_stride = 0;
};

// The [r, c] matrix at strides (sr, sc) as a row-major (i * ld + j) or column-major
// (i + j * ld) BLAS matrix, if it is one.
bool DescribeMatrix(int64_t r, int64_t c, int64_t sr, int64_t sc, bool* row_major, int64_t* ld) {
  if ((c == 1 || sc == 1) && (r == 1 || sr >= std::max<int64_t>(c, 1))) {
    *row_major = true;
    *ld = r == 1 ? std::max<int64_t>(c, 1) : sr;
    return *ld <= INT_MAX;
  }
  if ((r == 1 || sr == 1) && (c == 1 || sc >= std::max<int64_t>(r, 1))) {
    *row_major = false;
    *ld = c == 1 ? std::max<int64_t>(r, 1) : sc;
    return *ld <= INT_MAX;
  }
  return false;
}

// One stride that walks all batch dims (all but the last two) in row-major order, if any.
bool BatchStride(const Tensor& t, int64_t* stride) {
  const int nb = t.dim() - 2;
  bool first = true;
  int64_t inner_stride = 0, inner_count = 1;
  for (int d = nb - 1; d >= 0; --d) {
    if (t.size(d) == 1) continue;
    if (first) {
      inner_stride = t.stride(d);
      inner_count = t.size(d);
      first = false;
    } else {
      if (t.stride(d) != inner_stride * inner_count) return false;
      inner_count *= t.size(d);
    }
  }
  *stride = first ? 0 : inner_stride;
  return true;
}

bool Describe(const Tensor& t, Mat* m) {
  m->t = t;
  return DescribeMatrix(t.size(-2), t.size(-1), t.stride(-2), t.stride(-1), &m->row_major,
                        &m->ld) &&
         BatchStride(t, &m->batch_stride);
}

// An input operand in `dtype`, copied to a contiguous tensor when its layout is unusable.
absl::StatusOr<Mat> Input(const Tensor& t, DType dtype) {
  Mat m;
  if (t.dtype() == dtype && Describe(t, &m)) return m;
  // To(dtype) makes a contiguous copy; sizes were checked to fit cuBLAS's ints.
  CCTUNE_ASSIGN_OR_RETURN(Tensor c, t.dtype() == dtype ? t.Contiguous() : t.To(dtype));
  CCTUNE_CHECK(Describe(c, &m), "a contiguous tensor must be a BLAS matrix");
  return m;
}

absl::Status CheckInt(int64_t v, const char* what) {
  if (v > INT_MAX) {
    return absl::UnimplementedError(
        absl::StrCat("cuda Gemm: ", what, " = ", v, " exceeds cuBLAS's 32-bit sizes"));
  }
  return absl::OkStatus();
}

CuTensor Cu(const Tensor& t) { return ToCu(t.strided_view()); }

// out = a @ b (+ bias), or out += a @ b when `accumulate` (then bias is null, out f32).
absl::Status GemmImpl(Tensor& out, const Tensor& a, const Tensor& b, const Tensor* bias,
                      DType operand_dtype, bool accumulate) {
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  int64_t batch_count = 1;
  for (int d = 0; d < out.dim() - 2; ++d) batch_count *= out.size(d);
  if (out.numel() == 0) return absl::OkStatus();
  const int index = out.device().index;
  CCTUNE_RETURN_IF_ERROR(UseDevice(index));

  if (k == 0) {  // an empty sum: zeros, or the bias
    if (accumulate) return absl::OkStatus();
    CCTUNE_ASSIGN_OR_RETURN(Tensor zeros, Tensor::Zeros(out.shape(), out.dtype(), out.device()));
    if (bias == nullptr) return out.CopyFrom(zeros);
    CCTUNE_ASSIGN_OR_RETURN(Tensor bias_b, bias->Expand(out.shape()));
    return out.CopyFrom(bias_b);
  }
  CCTUNE_RETURN_IF_ERROR(CheckInt(m, "m"));
  CCTUNE_RETURN_IF_ERROR(CheckInt(n, "n"));
  CCTUNE_RETURN_IF_ERROR(CheckInt(k, "k"));
  CCTUNE_RETURN_IF_ERROR(CheckInt(batch_count, "batch"));

  CCTUNE_ASSIGN_OR_RETURN(Mat am, Input(a, operand_dtype));
  CCTUNE_ASSIGN_OR_RETURN(Mat bm, Input(b, operand_dtype));

  // The result goes straight into `out` when cuBLAS can write it there: a row-major matrix
  // per batch, batches at distinct offsets, a C dtype cuBLAS supports for these operands,
  // and (with a bias) f32, since the bias is pre-loaded into C and added with beta = 1.
  Mat cm;
  const bool c_dtype_ok = out.dtype() == DType::kF32 ||
                          (out.dtype() == operand_dtype && bias == nullptr && !accumulate);
  const bool direct = c_dtype_ok && Describe(out, &cm) && cm.row_major &&
                      (batch_count == 1 || cm.batch_stride != 0);
  if (!direct) {
    CCTUNE_ASSIGN_OR_RETURN(Tensor tmp, Tensor::Empty(out.shape(), DType::kF32, out.device()));
    CCTUNE_CHECK(Describe(tmp, &cm), "a contiguous tensor must be a BLAS matrix");
  }
  // Accumulating straight into `out`: C = A B + 1 * C.
  float beta = accumulate && direct ? 1.f : 0.f;
  if (bias != nullptr) {
    CCTUNE_ASSIGN_OR_RETURN(Tensor bias_b, bias->Expand(out.shape()));
    CCTUNE_RETURN_IF_ERROR(cm.t.CopyFrom(bias_b));
    beta = 1.f;
  }
  const float alpha = 1.f;

  // Row-major C[m, n] = A[m, k] B[k, n] is column-major C^T[n, m] = B^T[n, k] A^T[k, m]: a
  // row-major operand is already its own transpose in column-major terms (op N), a
  // column-major one needs op T.
  const cublasOperation_t op_b = bm.row_major ? CUBLAS_OP_N : CUBLAS_OP_T;
  const cublasOperation_t op_a = am.row_major ? CUBLAS_OP_N : CUBLAS_OP_T;
  CCTUNE_ASSIGN_OR_RETURN(cublasHandle_t h, Handle(index));
  const cudaDataType_t ab_type = CudaType(operand_dtype);
  const cudaDataType_t c_type = CudaType(cm.t.dtype());
  if (batch_count == 1) {
    CCTUNE_CUBLAS_RETURN_IF_ERROR(
        cublasGemmEx(h, op_b, op_a, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                     &alpha, bm.t.raw_data(), ab_type, static_cast<int>(bm.ld), am.t.raw_data(),
                     ab_type, static_cast<int>(am.ld), &beta, cm.t.raw_data(), c_type,
                     static_cast<int>(cm.ld), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  } else {
    CCTUNE_CUBLAS_RETURN_IF_ERROR(cublasGemmStridedBatchedEx(
        h, op_b, op_a, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha,
        bm.t.raw_data(), ab_type, static_cast<int>(bm.ld), bm.batch_stride, am.t.raw_data(),
        ab_type, static_cast<int>(am.ld), am.batch_stride, &beta, cm.t.raw_data(), c_type,
        static_cast<int>(cm.ld), cm.batch_stride, static_cast<int>(batch_count), CUBLAS_COMPUTE_32F,
        CUBLAS_GEMM_DEFAULT));
  }
  if (!direct) {
    if (!accumulate) return out.CopyFrom(cm.t);
    CCTUNE_CUDA_RETURN_IF_ERROR(LaunchAccumulate(Cu(out), Cu(cm.t), CuTensor(), nullptr));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Gemm(Tensor& out, const Tensor& a, const Tensor& b, const Tensor* bias,
                  DType operand_dtype) {
  return GemmImpl(out, a, b, bias, operand_dtype, /*accumulate=*/false);
}

absl::Status GemmAccumulate(Tensor& out, const Tensor& a, const Tensor& b, DType operand_dtype) {
  if (out.dtype() != DType::kF32) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda GemmAccumulate: out must be f32, got ", DTypeName(out.dtype())));
  }
  return GemmImpl(out, a, b, nullptr, operand_dtype, /*accumulate=*/true);
}

}  // namespace cuda
}  // namespace cctune
