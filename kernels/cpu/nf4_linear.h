// The NF4 linear (QLoRA's frozen base): y = x · Wᵀ and dx += dy · W with W [n, k] held in NF4
// (kernels/cpu/nf4.h) and never dequantized whole. Each thread dequantizes a panel of W into
// its own f32 scratch (about kNf4PanelFloats floats, 2 MiB; one row for few rows of x) with DequantizeNf4Range (the
// AVX-512 / AVX2 / scalar table lookup the CPU allows) and multiplies it by the GEMM library
// (kernels/cpu/gemm/gemm.h) on that thread:
//   forward   panels of rows of W (columns of y), y[:, r0:r1] = x · W[r0:r1, :]ᵀ;
//   backward  panels of columns of W (columns of dx, so threads never write the same
//             element), dx[:, c0:c1] += dy[:, r0:r1] · W[r0:r1, c0:c1] over row blocks r0.
// There is no dW: the NF4 weight is frozen. So the memory of W is Nf4Bytes(n · k) (0.52 byte
// per element) plus threads × 2 MiB of scratch, whatever the model size.
#ifndef CCTUNE_KERNELS_CPU_NF4_LINEAR_H_
#define CCTUNE_KERNELS_CPU_NF4_LINEAR_H_

#include <cstdint>

#include "kernels/cpu/nf4.h"

namespace cctune {
namespace cpu {

inline constexpr int64_t kNf4PanelFloats = 1 << 19;
// Forward with at most kNf4SmallRows rows (decode): one weight row at a time, dequantized into
// an L1-resident buffer and dotted with each row of x.
inline constexpr int64_t kNf4SmallRows = 8;

// y[m, n] (row stride n) = x[m, k] (row stride k) · dequant(w)ᵀ, w.numel == n · k.
void Nf4LinearForward(int64_t m, int64_t n, int64_t k, const float* x, const Nf4View& w,
                      float* y);
// dx[m, k] (row stride k) += dy[m, n] (row stride n) · dequant(w).
void Nf4LinearBackwardDx(int64_t m, int64_t n, int64_t k, const float* dy, const Nf4View& w,
                         float* dx);

}  // namespace cpu
}  // namespace cctune

#endif  // CCTUNE_KERNELS_CPU_NF4_LINEAR_H_
