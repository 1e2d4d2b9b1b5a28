// CPU matrix multiplication: the f32 GEMM behind Linear/Matmul and the memory-bound
// bf16/f16-weight GEMV/GEMM of CPU decode.
//
// GemmNT is the Linear shape: activations A [m, k] (f32) times weights B [n, k] (f32, bf16 or
// f16, stored as in a checkpoint) transposed. Up to 128 rows of f32 B, 31 of 16-bit B (decode,
// small batches) a streaming kernel reads B exactly once, all threads splitting n, and
// converts bf16/f16 to f32 in registers (AVX-512 / AVX2+F16C chosen at run time, scalar
// fallback). Larger m of f32 B (long prefill, training) goes to OpenBLAS. The blocked, packed
// GEMM of packed_gemm.h (BLIS-style cache blocking, B converted to f32 while packing, f32 FMA
// micro-kernels at the CPU's level) is the kPacked path: kAuto's choice for 16-bit B from 32
// rows where the routes below do not apply (AVX2: 115 vs 81 GFLOP/s at 128 rows on a Zen 3);
// for f32 B measured within noise of the OpenBLAS route on the (loaded) 2-core Xeon. SgemmStrided is a row-major cblas_sgemm (OpenBLAS, the streaming
// kernel for A·Bᵀ with few rows); PackedSgemm covers its transposed cases too (the training
// GEMMs dY·W and dYᵀ·X) and SetLargeGemmRoute switches every large GEMM to it, but on the
// training shapes measured it was behind OpenBLAS (benchmarks/README.md, train_bench).
//
// bf16 weights at m >= AmxMinRows() (prefill) on a CPU with AMX (amx_gemm.h) take the AMX tile
// GEMM, which rounds A (the activations) to bf16 as well: what PyTorch/torchtune do for bf16
// matmuls, and llama.cpp for bf16 weights. Error |C - A·Bᵀ| <= ~2^-8 · sum_k |a·b| (A's
// rounding, relative <= 2^-8 per element, plus the f32 sums): the order of the error already made
// by storing B in bf16. CCTUNE_GEMM_EXACT_A=1 (or a ScopedExactGemm) keeps A exact in f32 (the
// routes below). With AMX, decode (m = 1) and small m stay on the f32 streaming kernel.
// Without AMX, bf16 weights at m >= Bf16DotMinRows() (and at every m in a training step:
// ScopedBatchInvariantGemm) take the packed GEMM's vdpbf16ps kernel (kPackedBf16, same rounding
// of A), and fewer rows (decode) the streaming kernel's vdpbf16ps tile (kAvx512Bf16), only on a
// CPU whose vdpbf16ps issues at the f32 FMA's rate (AMD Zen 4/5: twice the f32 flops); the
// backward's dY·W and dYᵀ·X of bf16 weights likewise (GemmNNBf16, GemmTNBf16). Otherwise kAuto
// never rounds A to bf16: on the AVX-512 BF16 Xeon measured,
// vdpbf16ps issues at half the rate of f32 FMA (32 vs 64 flops / cycle / core,
// benchmarks/README.md), so the vector bf16 dot paths are neither exact in A nor faster there.
//
// Threading: the streaming kernel runs on the persistent ThreadPool::Default()
// (kernels/cpu/thread_pool.h: one fork/join per call, no OpenMP barrier); the OpenBLAS route
// uses OpenMP. OpenBLAS is switched to one thread on first use (openblas_set_num_threads(1),
// process-wide) and called per block of C from OpenMP threads, so the thread pools never
// busy-wait against each other. Code elsewhere should reach BLAS through this library. Called
// inside a `#pragma omp parallel` region or a pool task, a call runs on the calling thread
// only (still correct).
#ifndef CCTUNE_KERNELS_CPU_GEMM_GEMM_H_
#define CCTUNE_KERNELS_CPU_GEMM_GEMM_H_

#include <cstdint>

#include "core/dtype.h"

namespace cctune::cpu {

// C[m, n] = A[m, k] · B[n, k]ᵀ + beta·C. A: f32 rows (stride lda). B: dtype b_dtype
// (kF32/kBF16/kF16) rows (stride ldb, in elements). C: f32 rows (stride ldc). Threads inside.
// beta == 0 overwrites C without reading it (NaNs in C do not propagate). k == 0 gives
// C = beta·C. Strides must be >= the row lengths; b_dtype outside the three aborts.
void GemmNT(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const void* b,
            DType b_dtype, int64_t ldb, float* c, int64_t ldc, float beta);

// C[m, n] = op(A)[m, k] · op(B)[k, n] + beta·C, all f32 row-major with leading strides
// (like cblas_sgemm(CblasRowMajor, transA, transB, m, n, k, 1, a, lda, b, ldb, beta, c, ldc)).
// op(A) is A [m, k] (lda >= k) or, when trans_a, Aᵀ of A [k, m] (lda >= m); likewise B.
void SgemmStrided(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
                  int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, float beta);

// C[m, n] = A[m, k] · B[k, n] + beta·C for bf16 B stored row-major [k, n] (stride ldb >= n):
// the training GEMM dX = dY·W with bf16 weights. Runs where GemmNT's kAuto would round A to
// bf16 for m rows on the packed vdpbf16ps kernel (gemm_internal::AutoBf16Route(m) ==
// kPackedBf16: Zen 4/5), with the same error bound, and returns true; elsewhere returns false
// with C untouched, and the caller multiplies in f32 (kernels/cpu/linear.cc).
bool GemmNNBf16(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const void* b,
                int64_t ldb, float* c, int64_t ldc, float beta);

// C[m, n] = Aᵀ · B + beta·C with A stored [k, m] and B [k, n] (row-major, f32): the training
// GEMM dW = dYᵀ·X of a bf16 weight, whose k is the tokens. Where GemmNNBf16 would run (the
// packed vdpbf16ps kernel for k >= Bf16DotMinRows() tokens), both operands are rounded to
// bf16, as PyTorch's bf16 training has them (|err| <= ~2^-7 · sum |a·b|), and it returns true;
// elsewhere false, C untouched (the caller's f32 route).
bool GemmTNBf16(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                int64_t ldb, float* c, int64_t ldc, float beta);

// Batch-invariant routing, process-wide while any ScopedBatchInvariantGemm lives (TrainStep
// holds one, training/train_step.cc): a row's result must not depend on how many rows share
// the call, so that a step on N ranks of 1/N of the batch computes what one rank does. It makes
// GemmNT take the packed vdpbf16ps kernel for bf16 B at every m where
// gemm_internal::Bf16DotRouteEnabled()
// (the streaming kernel's rows sum in another order). Nests; create it outside parallel regions.
bool BatchInvariantGemm();
class ScopedBatchInvariantGemm {
 public:
  ScopedBatchInvariantGemm();
  ~ScopedBatchInvariantGemm();
  ScopedBatchInvariantGemm(const ScopedBatchInvariantGemm&) = delete;
  ScopedBatchInvariantGemm& operator=(const ScopedBatchInvariantGemm&) = delete;
};

// While any lives (process-wide), kAuto keeps A exact in f32 on every path, as
// CCTUNE_GEMM_EXACT_A=1 does: the AMX and vdpbf16ps routes are off (AmxRouteEnabled() and
// Bf16DotRouteEnabled() false), so bf16 weights compute with f32 activations to f32 precision.
// For comparisons at that precision (tests) and runs that want it. Nests; create it outside
// parallel regions.
class ScopedExactGemm {
 public:
  ScopedExactGemm();
  ~ScopedExactGemm();
  ScopedExactGemm(const ScopedExactGemm&) = delete;
  ScopedExactGemm& operator=(const ScopedExactGemm&) = delete;
};

// ---- Internals exposed for tests and benchmarks. ----
namespace gemm_internal {

// Instruction-set paths of the small-m (streaming) GemmNT kernel.
enum class GemmIsa {
  kAuto,    // best supported path; large m uses OpenBLAS
  kScalar,  // portable C++ (any CPU)
  kAvx2,    // AVX2 + FMA + F16C
  kAvx512,  // AVX-512 F/BW/VL/DQ (bf16 by shift/mask, f16 through _mm512_cvtph_ps)
  // bf16 B only (other dtypes fall back to kAvx512): A is rounded to bf16 and the products
  // are summed in f32 with _mm512_dpbf16_ps. The extra A rounding gives errors of the order of
  // bf16 epsilon (2^-8) times sum_k |a·b|: the same order as storing B in bf16 in the first
  // place. kAuto's choice for bf16 B below Bf16DotMinRows() rows (decode) where
  // Bf16DotRouteEnabled().
  kAvx512Bf16,
  kBlas,  // always the OpenBLAS route (B converted to f32 panels when 16-bit)
  // The blocked, packed GEMM (packed_gemm.h) at BestPackedIsa(): f32 FMA, 16-bit B converted
  // to f32 while packing.
  kPacked,
  // The packed GEMM's vdpbf16ps kernel (bf16 B only; other dtypes fall back to kPacked): A
  // rounded to bf16 as for kAvx512Bf16. Needs AVX512_BF16.
  kPackedBf16,
  // The AMX tile GEMM (amx_gemm.h): A and B rounded to bf16 while packing, tdpbf16ps, f32
  // sums (error as kAvx512Bf16). f32 or bf16 B (f16 falls back to kPacked). Needs
  // AmxBf16Available(). kAuto's choice for bf16 B at
  // m >= AmxMinRows() (see GemmNT).
  kAmx,
};

const char* GemmIsaName(GemmIsa isa);
// Whether `isa` may run now: the CPU's level, lowered by CCTUNE_CPU_ISA or a ScopedIsaLevel
// (kernels/cpu/isa.h). kAuto, kScalar and kBlas are always true.
bool GemmIsaSupported(GemmIsa isa);
// The path kAuto resolves to for the streaming kernel now (kAvx512, kAvx2 or kScalar).
GemmIsa BestGemmIsa();

// The fewest rows of A at which kAuto sends a bf16-weight GemmNT to the AMX GEMM.
int64_t AmxMinRows();
// Whether kAuto may take the AMX route for bf16 B now: AmxBf16Available() and
// CCTUNE_GEMM_EXACT_A unset (or "0") and no ScopedExactGemm; otherwise every path keeps A in
// f32.
bool AmxRouteEnabled();
// The fewest rows of A at which kAuto sends a bf16-weight GemmNT to kPackedBf16 (where
// Bf16DotRouteEnabled()).
int64_t Bf16DotMinRows();
// Whether kAuto may take the vdpbf16ps kernels for bf16 B now (the packed GEMM from
// Bf16DotMinRows() rows, the streaming kernel below): no AMX, a CPU whose bf16 dot product
// runs at the f32 FMA's rate (cpu::FullRateBf16DotSupported(): AMD Zen 4/5), and
// CCTUNE_GEMM_EXACT_A unset (or "0") and no ScopedExactGemm.
bool Bf16DotRouteEnabled();
// The path kAuto takes now for a bf16-weight GemmNT with m rows when that path rounds A to
// bf16 (kAmx, kPackedBf16 or kAvx512Bf16), else kAuto (the f32-exact routes). Tests size
// their bounds by it.
GemmIsa AutoBf16Route(int64_t m);

// GemmNT with the path forced. Aborts if `isa` is not supported here.
void GemmNTWithIsa(GemmIsa isa, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                   const void* b, DType b_dtype, int64_t ldb, float* c, int64_t ldc, float beta);

// SgemmStrided's routes: kAuto (what SgemmStrided does), always OpenBLAS, always the packed
// GEMM (PackedSgemm at BestPackedIsa()).
enum class SgemmPath { kAuto, kBlas, kPacked };
const char* SgemmPathName(SgemmPath path);
// Process-wide: what kAuto does past the streaming kernel's rows (GemmNT's large m, f32 B, and
// SgemmStrided): kAuto = this library's measured choice; kBlas / kPacked force that route (for
// benchmarks that compare whole training steps new vs old in one process). Returns the
// previous setting.
SgemmPath SetLargeGemmRoute(SgemmPath route);
// Process-wide: how far ahead (bytes) the streaming kernels (GEMV, few rows of A) prefetch
// 16-bit B; 0 turns the software prefetch off (benchmarks compare both in one process).
// Returns the previous setting.
int64_t SetStreamPrefetchBytes(int64_t bytes);
SgemmPath LargeGemmRoute();
void SgemmStridedWithPath(SgemmPath path, bool trans_a, bool trans_b, int64_t m, int64_t n,
                          int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                          float* c, int64_t ldc, float beta);

}  // namespace gemm_internal
}  // namespace cctune::cpu

#endif  // CCTUNE_KERNELS_CPU_GEMM_GEMM_H_
