// CPU elementwise kernels: Add, Mul (with b broadcast to a's shape), Scale, SiluMul, and
// their backward ops.
// Arguments are validated by kernels/ops.cc; any strides, f32/bf16/f16 storage, f32 math.
// `out` may be the same tensor as an input.
#ifndef CCTUNE_KERNELS_CPU_ELEMENTWISE_H_
#define CCTUNE_KERNELS_CPU_ELEMENTWISE_H_

#include "absl/status/status.h"
#include "core/tensor.h"

namespace cctune {
namespace cpu {

absl::Status Add(Tensor& out, const Tensor& a, const Tensor& b);
absl::Status Mul(Tensor& out, const Tensor& a, const Tensor& b);
absl::Status Scale(Tensor& out, const Tensor& x, float alpha);
// out = silu(gate) * up, silu(g) = g / (1 + exp(-g)).
absl::Status SiluMul(Tensor& out, const Tensor& gate, const Tensor& up);

// Backward ops (ops.h documents them): every gradient accumulates (+=) into f32 tensors.
absl::Status SiluMulBackward(Tensor& dgate, Tensor& dup, const Tensor& dy, const Tensor& gate,
                             const Tensor& up);
// The reduction over broadcast dims sums in an order fixed by the shapes (thread-independent).
absl::Status AddBackward(Tensor* da, Tensor* db, const Tensor& dy);
absl::Status MulBackward(Tensor* da, Tensor* db, const Tensor& dy, const Tensor& a,
                         const Tensor& b);

}  // namespace cpu
}  // namespace cctune

#endif  // CCTUNE_KERNELS_CPU_ELEMENTWISE_H_
