// Blocked, packed GEMM in the BLIS manner for the Linear shape at large m (prefill, training):
// C[m, n] = A[m, k] · B[n, k]ᵀ + beta·C, A f32 activations, B weights f32 / bf16 / f16 as
// stored. GemmNT (gemm.h) reaches it as GemmIsa::kPacked / kPackedBf16.
//
// Loops (per thread, BLIS order): n in blocks of nc, k in blocks of kc (B's kc x nc block is
// packed into micro-panels of NR columns, converted to the micro-kernel's element type), m in
// blocks of mc, then NR-column micro-panels, then MR-row strips of A: the micro-kernel keeps an
// MR x NR tile of C in registers and does one outer-product step per k (A broadcast, B loaded
// as NR/lanes vectors). A is packed once per call, for all threads, into MR-row strips per
// k-block (f32, or bf16 pairs for the bf16 dot kernel). Threads split n (in micro-panels), or
// m when n is too narrow to give each thread several micro-panels.
//
// Micro-kernels (chosen at run time, kernels/cpu/isa.h):
//   kAvx512Bf16  bf16 B only: A rounded to bf16, _mm512_vdpbf16ps (32 products per
//                instruction). PackedGemmNT with k >= 1024 or B of >= 4 MiB (prefill's
//                weights) does not transpose B: 32 rows of A (packed as bf16
//                pairs) x 12 rows of B (a pair of each broadcast per k-step from B's rows as
//                stored, each group's k-block first copied row by row to a buffer whose
//                rows do not share L1 sets), k-blocks of 2048, m-blocks of 128 rows, the
//                tile transposed in registers when stored (the micro-panels' transposes
//                were 10-15% of a 128-row GEMM). Smaller NT products (B in cache, where the
//                in-place tile's transposed store costs more than packing), PackedGemmNN and
//                PackedSgemm (k-major B) pack B as bf16 pairs interleaved along k, 12 x 32
//                tile.
//   kAvx512      f32 FMA, B converted to f32 while packing, 12 x 32 tile (24 zmm accumulators).
//   kAvx2        f32 FMA (AVX2 + FMA + F16C), 6 x 16 tile (12 ymm accumulators).
//   kScalar      portable C++, 4 x 4 tile.
// Error: the f32 paths sum each k-block's products in f32 in k order (|err| <= ~k·eps32 ·
// sum|a·b|, as any f32 GEMM). kAvx512Bf16 also rounds A to bf16 (relative 2^-8 per element,
// bf16's unit roundoff), so |err| <= ~2^-8 · sum_k |a·b|: the order of the error already made
// by storing B in bf16.
#ifndef CCTUNE_KERNELS_CPU_GEMM_PACKED_GEMM_H_
#define CCTUNE_KERNELS_CPU_GEMM_PACKED_GEMM_H_

#include <cstdint>

#include "core/dtype.h"

namespace cctune::cpu {

enum class PackedIsa { kScalar, kAvx2, kAvx512, kAvx512Bf16 };

// "scalar", "avx2", "avx512", "avx512_bf16".
const char* PackedIsaName(PackedIsa isa);
// Whether `isa` may run now (kernels/cpu/isa.h: the CPU's level, lowered by CCTUNE_CPU_ISA or a
// ScopedIsaLevel). kAvx512Bf16 needs bf16 B as well (PackedGemmNT checks).
bool PackedIsaSupported(PackedIsa isa);
// The fastest f32-accumulating path for this CPU now (kAvx512, kAvx2 or kScalar): never
// kAvx512Bf16, which rounds A (see gemm.h for when GemmNT uses it).
PackedIsa BestPackedIsa();

// The block sizes of a path (elements; kc is a multiple of the k-step, 2 for bf16 pairs).
// For kAvx512Bf16 these are the pair micro-panels' (PackedGemmNN, PackedSgemm); its
// PackedGemmNT blocks are in the comment above.
struct PackedBlocking {
  int mr, nr;          // register tile of C
  int64_t kc, mc, nc;  // cache blocks: B micro-panel kc x nr in L1, A block mc x kc in L2
};
PackedBlocking PackedGemmBlocking(PackedIsa isa);

// C = A · Bᵀ + beta·C with the packed GEMM on `isa` (CHECKs: supported, bf16 B for
// kAvx512Bf16, sizes >= 0, strides >= row lengths). beta == 0 does not read C. OpenMP inside
// (one thread when called inside a parallel region or for small products).
void PackedGemmNT(PackedIsa isa, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                  const void* b, DType b_dtype, int64_t ldb, float* c, int64_t ldc, float beta);

// C[m, n] = A[m, k] · B[k, n] + beta·C with B stored row-major [k, n] (ldb >= n): the training
// GEMM dX = dY·W for weights as stored. bf16 B on kAvx512Bf16 (A rounded to bf16 as for
// PackedGemmNT; B's row pairs packed straight into bf16-pair micro-panels), or f32 B on an f32
// path (PackedSgemm). Other combinations, unsupported paths, bad sizes or strides: CHECK.
void PackedGemmNN(PackedIsa isa, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                  const void* b, DType b_dtype, int64_t ldb, float* c, int64_t ldc, float beta);

// C[m, n] = op(A)[m, k] · op(B)[k, n] + beta·C, all f32 row-major, as SgemmStrided (gemm.h):
// op(A) = A [m, k] (lda >= k) or, trans_a, Aᵀ of A [k, m] (lda >= m); op(B) = B [k, n]
// (ldb >= n) or, trans_b, Bᵀ of B [n, k] (ldb >= k). The training GEMMs: x·Wᵀ is
// (false, true), dY·W (false, false), dYᵀ·X (true, false). k-major operands are packed by
// plain copies (each k-step's values are contiguous), rows by the in-register transposes;
// same micro-kernels, blocking and threading as PackedGemmNT. `isa`: kScalar, kAvx2 or
// kAvx512; or kAvx512Bf16 with trans_b false (dY·W, dYᵀ·X), which rounds both A and B to bf16
// (to nearest even) while packing: |err| <= ~2^-7 · sum_k |a·b| (CHECKed, with sizes and
// strides).
void PackedSgemm(PackedIsa isa, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                 const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                 float beta);

}  // namespace cctune::cpu

#endif  // CCTUNE_KERNELS_CPU_GEMM_PACKED_GEMM_H_
