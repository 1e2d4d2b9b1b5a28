// CPU Linear and Matmul on top of the GEMM library (//kernels/cpu/gemm). Arguments are
// validated by kernels/ops.cc. Operands are used in place when the GEMM can read their layout
// (f32 with a unit stride on either matrix dim); otherwise they are converted to f32 scratch,
// which costs O(m·k + k·n) next to the O(m·n·k) product. `out` must not overlap the inputs.
#ifndef CCTUNE_KERNELS_CPU_LINEAR_H_
#define CCTUNE_KERNELS_CPU_LINEAR_H_

#include "absl/status/status.h"
#include "core/tensor.h"

namespace cctune {
namespace cpu {

// out[..., n] = x[..., k] · w[n, k]ᵀ (+ bias[n]); bias may be null.
absl::Status Linear(Tensor& out, const Tensor& x, const Tensor& w, const Tensor* bias);
// out[B..., m, n] = a[B..., m, k] @ b[B..., k, n].
absl::Status Matmul(Tensor& out, const Tensor& a, const Tensor& b);

// dx += dy · w, dw += dyᵀ · x, dbias += sum_rows dy (each optional; ops.h has the contract).
// f32 gradients are accumulated in place by the GEMM (beta = 1) when their layout allows; w in
// bf16/f16 (or an unreadable layout) is converted to f32 a block of rows at a time for dx.
absl::Status LinearBackward(Tensor* dx, Tensor* dw, Tensor* dbias, const Tensor& dy,
                            const Tensor& x, const Tensor& w);

}  // namespace cpu
}  // namespace cctune

#endif  // CCTUNE_KERNELS_CPU_LINEAR_H_
