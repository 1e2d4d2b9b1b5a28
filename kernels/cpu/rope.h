// CPU rotary position embedding kernels: the cos/sin tables and the rotation itself
// (ops.h documents shapes and pairings). Arguments are validated by kernels/ops.cc.
#ifndef CCTUNE_KERNELS_CPU_ROPE_H_
#define CCTUNE_KERNELS_CPU_ROPE_H_

#include "absl/status/status.h"
#include "core/tensor.h"
#include "kernels/op_types.h"

namespace cctune {
namespace cpu {

// cos[p, i] = cos(f32(p) * inv_freq[i]), the product rounded to f32 as torchtune's einsum does.
absl::Status RopeCache(Tensor& cos, Tensor& sin, const Tensor& inv_freq);
// Returns OutOfRange naming the first position outside [0, max_seq_len) before writing out.
absl::Status Rope(Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin,
                  const Tensor& positions, ops::RopePairing pairing);
// dx = dy rotated by -θ (Rope with sin negated); dx may be dy itself.
absl::Status RopeBackward(Tensor& dx, const Tensor& dy, const Tensor& cos, const Tensor& sin,
                          const Tensor& positions, ops::RopePairing pairing);

}  // namespace cpu
}  // namespace cctune

#endif  // CCTUNE_KERNELS_CPU_ROPE_H_
