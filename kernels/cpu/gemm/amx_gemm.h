// bf16 GEMM on Intel AMX tiles (Sapphire Rapids: AMX-TILE + AMX-BF16), for bf16 prefill and
// bf16 training GEMMs.
//
// C[m, n] = op(A)[m, k] · op(B)[k, n] + beta·C with both operands rounded to bf16 while they
// are packed and the products summed in f32 by tdpbf16ps (16 x 16 f32 C tile += 16 x 32 bf16
// A tile · 32 x 16 bf16 B tile, 16 x 16 x 32 multiply-adds per instruction).
//
// Layout (amx_gemm.cc): op(A) is packed once per call, for all threads, into 16-row strips of
// 32-element k chunks (one 1 KiB A tile each, k blocks of kc = 512); op(B) per thread into
// 16-column VNNI micro-panels (tile row p holds the pairs (B[2p][j], B[2p + 1][j]) of the 16
// columns). The micro-kernel keeps a 32 x 32 block of C in four tiles (2 A + 2 B tiles loaded
// per 32-wide k step, four tdpbf16ps). The packing does all of the transposing, the f32 ->
// bf16 rounding (round to nearest even) and the zero padding of ragged edges; partial C
// blocks go through a scratch tile. Threads split n in 32-column units, or m when n is narrow
// (same policy as PackedSgemm: one thread inside a parallel region).
//
// Error: each operand element carries a relative rounding of <= 2^-9 (bf16's, none for bf16
// inputs), then the products are exact and summed in f32: |C - C_exact(bf16 inputs)| <=
// ~k·2^-24·sum_k |a·b| (k-block partial sums round through C). Denormal bf16 inputs are read
// as zero and denormal results flushed (tdpbf16ps ignores MXCSR).
#ifndef CCTUNE_KERNELS_CPU_GEMM_AMX_GEMM_H_
#define CCTUNE_KERNELS_CPU_GEMM_AMX_GEMM_H_

#include <cstdint>

#include "core/dtype.h"

namespace cctune::cpu {

// True when the CPU has AMX-TILE + AMX-BF16, the OS granted XTILEDATA (arch_prctl
// ARCH_REQ_XCOMP_PERM, done once per process, thread-safe), and the run-time ISA level
// (kernels/cpu/isa.h, CCTUNE_CPU_ISA / ScopedIsaLevel) allows AMX: AmxSupported().
bool AmxBf16Available();

// C[m, n] = op(A)[m, k] · op(B)[k, n] + beta·C, conventions exactly as PackedSgemm
// (packed_gemm.h): op(A) = A [m, k] (lda >= k) or, trans_a, Aᵀ of A [k, m] (lda >= m);
// op(B) = B [k, n] (ldb >= n) or, trans_b, Bᵀ of B [n, k] (ldb >= k). A and B are kF32 or
// kBF16 (f32 rounded to bf16, round-to-nearest-even, while packing), C f32 row-major,
// beta == 0 does not read C. Products summed in f32 (tdpbf16ps). Threads inside (same policy
// as PackedSgemm: one thread inside a parallel region / pool task). CHECKs AmxBf16Available().
void AmxGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const void* a,
             DType a_dtype, int64_t lda, const void* b, DType b_dtype, int64_t ldb, float* c,
             int64_t ldc, float beta);

}  // namespace cctune::cpu

#endif  // CCTUNE_KERNELS_CPU_GEMM_AMX_GEMM_H_
