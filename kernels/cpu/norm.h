// CPU row-wise normalisations over the last dim: RmsNorm and Softmax (ops.h documents them).
// Arguments are validated by kernels/ops.cc; any strides, f32/bf16/f16, f32 math; out may be
// the input itself.
#ifndef CCTUNE_KERNELS_CPU_NORM_H_
#define CCTUNE_KERNELS_CPU_NORM_H_

#include "absl/status/status.h"
#include "core/tensor.h"

namespace cctune {
namespace cpu {

absl::Status RmsNorm(Tensor& out, const Tensor& x, const Tensor& weight, float eps);
// sum = a + b, then norm = RmsNorm(sum) (from sum as stored, rounded to sum's dtype), in one
// pass over the rows: the residual add and the next norm of a decoder layer. Bit-identical to
// Add followed by RmsNorm. Same shapes throughout; sum may be a or b itself.
absl::Status AddRmsNorm(Tensor& sum, Tensor& norm, const Tensor& a, const Tensor& b,
                        const Tensor& weight, float eps);
// A row whose entries are all -inf gives NaN, as torch.softmax does.
absl::Status Softmax(Tensor& out, const Tensor& x);

// dx += ∂/∂x and dweight (optional) += sum_rows dy∘x̂, f32. rstd is recomputed per row; the
// weight gradient is reduced over fixed row blocks (BlockedRowReduce).
absl::Status RmsNormBackward(Tensor& dx, Tensor* dweight, const Tensor& dy, const Tensor& x,
                             const Tensor& weight, float eps);
// dx = y · (dy - sum(dy · y)) per row (written); dx may be dy itself.
absl::Status SoftmaxBackward(Tensor& dx, const Tensor& dy, const Tensor& y);

}  // namespace cpu
}  // namespace cctune

#endif  // CCTUNE_KERNELS_CPU_NORM_H_
