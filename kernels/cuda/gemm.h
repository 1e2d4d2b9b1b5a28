// cuBLAS matrix products on CUDA tensors, with f32 accumulation whatever the storage dtype.
// Used by the cuda backend's Linear, Matmul and LinearBackward.
#ifndef CCTUNE_KERNELS_CUDA_GEMM_H_
#define CCTUNE_KERNELS_CUDA_GEMM_H_

#include "absl/status/status.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace cctune {
namespace cuda {

// out[B..., m, n] = a[B..., m, k] @ b[B..., k, n] (+ bias[n]), all on one CUDA device.
// Batch dims are equal (stride-0 broadcast dims are fine). a and b are multiplied in
// `operand_dtype` (f32, bf16 or f16; operands of another dtype are converted first) with
// CUBLAS_COMPUTE_32F. Row- and column-major operands are used in place; other layouts are
// copied. The result is rounded once into out's dtype (bias is added in f32 first).
absl::Status Gemm(Tensor& out, const Tensor& a, const Tensor& b, const Tensor* bias,
                  DType operand_dtype);

// out[B..., m, n] += a[B..., m, k] @ b[B..., k, n] for an f32 `out` (a gradient), with the
// operand rules of Gemm. Runs with beta = 1 straight into `out` when cuBLAS can write it;
// otherwise the product goes to a scratch matrix that is then added to `out`.
absl::Status GemmAccumulate(Tensor& out, const Tensor& a, const Tensor& b, DType operand_dtype);

}  // namespace cuda
}  // namespace cctune

#endif  // CCTUNE_KERNELS_CUDA_GEMM_H_
