// CPU attention backward (ops.h documents the contract). Arguments are validated by
// kernels/ops.cc.
//
// The softmax is recomputed from q and k with the rows' log-sum-exp (given, or recomputed in
// a first pass), P = exp(scale·q·k - lse), and D = dy·out per row (given out, or recomputed
// as sum_j P·(dy·v_j)). Then two passes, each free of write conflicts:
//   dk, dv: units of (batch, kv head, block of keys), each summing over every query row of
//     the n_h / n_kv heads of its group, by tiles of query rows;
//     dv_j += sum_i P_ij dy_i,  dk_j += scale · sum_i P_ij (dy_i·v_j - D_i) q_i.
//   dq: units of (batch, head, tile of query rows);
//     dq_i += scale · sum_j P_ij (dy_i·v_j - D_i) k_j,
//     with dS_ij = P_ij (dy_i·v_j - D_i) as the first pass stored it when all of them fit in
//     64 MiB (b·n_h·s_q·s_kv floats), else recomputed (the same values).
// A key block is stored transposed ([h_d][keys]) so that the scores and dy·v of a tile of rows
// against the block are vertical multiply-adds, kept in registers (16-float vectors).
// Every sum runs in an order fixed by the shapes, so results do not depend on the thread count.
// Inputs that are not f32 with a unit last-dim stride are converted to f32 copies first.
#ifndef CCTUNE_KERNELS_CPU_ATTENTION_BACKWARD_H_
#define CCTUNE_KERNELS_CPU_ATTENTION_BACKWARD_H_

#include "absl/status/status.h"
#include "core/tensor.h"
#include "kernels/op_types.h"

namespace cctune {
namespace cpu {

absl::Status AttentionBackward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dy,
                               const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* out,
                               const Tensor* lse, const ops::AttentionOptions& options);

}  // namespace cpu
}  // namespace cctune

#endif  // CCTUNE_KERNELS_CPU_ATTENTION_BACKWARD_H_
