// CPU scaled dot-product attention with grouped K/V heads (ops.h documents the contract).
// Arguments are validated by kernels/ops.cc.
//
// q/k/v are read through their strides (no copy of K/V; rows with a unit last-dim stride in
// f32 are read in place, others are converted one 64-key block at a time). Work is split
// into units of (batch, kv head, tile of query positions) covering all n_h / n_kv query heads
// of the group, so each K/V block is read once for the whole group. Each unit runs an online
// (streaming) softmax in f32 over 64-key blocks; a unit of 8 or more query rows (heads x
// positions) with h_d >= 32 computes each block's scores QKᵀ and its P·V in register tiles
// (f32 FMA, or bf16 dot products: AttentionRoundsToBf16 below), smaller ones (decode) by dot
// products. Measured
// on the 15.7M training benchmark's forward (1 thread, loaded Xeon, min of 3 alternating runs):
// 170 -> 125 ms per step. When there are fewer units than threads
// (decode: s_q = 1) the keys are split into chunks whose partial softmax results are merged.
#ifndef CCTUNE_KERNELS_CPU_ATTENTION_H_
#define CCTUNE_KERNELS_CPU_ATTENTION_H_

#include "absl/status/status.h"
#include "core/tensor.h"
#include "kernels/op_types.h"

namespace cctune {
namespace cpu {

absl::Status Attention(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                       const ops::AttentionOptions& options);
// Attention that also writes lse [b, n_h, s_q] = m + log(l) from the online softmax.
absl::Status AttentionWithLse(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k,
                              const Tensor& v, const ops::AttentionOptions& options);

// Whether Attention (not AttentionWithLse) of these [b, n, s, h_d] operands takes the bf16
// dot-product route: a bf16 K and V, s_q > 1, h_d a multiple of 16, tiles of 8 or more rows,
// and a CPU whose GEMMs take the vdpbf16ps kernels (gemm_internal::Bf16DotRouteEnabled():
// AMD Zen 4/5 without CCTUNE_GEMM_EXACT_A or a ScopedExactGemm). There Q·Kᵀ and P·V are bf16
// dot products with f32 sums: the scaled queries and the probabilities are rounded to bf16
// (relative 2^-9 each; K and V are used exactly), so |out - exact| <= ~(2^-8 · max_j
// scale·sum_e |q_e·k_je| + 2^-9) · sum_j p_j·|v_j|. Tests size their bounds by it.
bool AttentionRoundsToBf16(const Tensor& q, const Tensor& k, const Tensor& v);

}  // namespace cpu
}  // namespace cctune

#endif  // CCTUNE_KERNELS_CPU_ATTENTION_H_
