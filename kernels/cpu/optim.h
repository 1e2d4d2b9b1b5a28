// CPU optimizer updates (ops::AdamWUpdate, ops::SgdUpdate, ops::SquaredNorm) over validated
// flat buffers: one fused loop over fixed chunks of 2^14 elements, on all cores when the
// buffer is large (OpenMP), SIMD within a chunk. The updates are element-wise and the norm's
// partial sums follow the fixed chunks, so every result is independent of the thread count.
#ifndef CCTUNE_KERNELS_CPU_OPTIM_H_
#define CCTUNE_KERNELS_CPU_OPTIM_H_

#include "absl/status/status.h"
#include "core/tensor.h"
#include "kernels/op_types.h"

namespace cctune {
namespace cpu {

absl::Status AdamWUpdate(Tensor& param, Tensor* master, Tensor& exp_avg, Tensor& exp_avg_sq,
                         const Tensor& grad, const ops::AdamWScalars& s);
absl::Status SgdUpdate(Tensor& param, Tensor* master, Tensor* momentum_buffer,
                       const Tensor& grad, const ops::SgdScalars& s);
absl::Status SquaredNorm(double* sum, const Tensor& x);

}  // namespace cpu
}  // namespace cctune

#endif  // CCTUNE_KERNELS_CPU_OPTIM_H_
