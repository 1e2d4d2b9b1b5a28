// Weight-only quantization on the CPU: int8 with one scale per output channel and int4 with
// one scale and zero point per group of `groupsize` inputs, the two formats of torchtune's
// Int8WeightOnlyQuantizer / Int4WeightOnlyQuantizer (torchao's schemes; docs/generation.md,
// "Quantized models"). Quantize (f32/bf16/f16 -> int8/int4), dequantize (-> f32), and the
// weight-only GEMM of a quantized projection, y[m, n] = x[m, k] · dequant(W)[n, k]ᵀ.
//
// Formats, row-major over the n output channels (rows) of a weight [n, k]:
//   int8: symmetric. scale_j = max_i |W[j, i]| / 127 (1 for an all-zero row), q = clamp(
//         round(W / scale_j), -127, 127) stored as int8; W ≈ q · scale_j. A row takes
//         Int8RowBytes(k) bytes (k rounded up to 4; the padding is 0). Scales f32 [n].
//   int4: asymmetric (min/max) per group, as torchao's groupwise affine int4: scale =
//         (max - min) / 15 (at least 1e-6), zero = min + 8 · scale, both rounded to bf16;
//         q = clamp(round((W - (zero - 8·scale)) / scale), 0, 15) and W ≈ (q - 8) · scale +
//         zero. Groups of `groupsize` (a multiple of 32) consecutive inputs, the last one
//         shorter when k is not a multiple. Nibbles are packed per block of 32 inputs as in
//         llama.cpp's Q4_0: byte t (0..15) of a block holds input t in its low nibble and
//         input t + 16 in its high nibble; a row takes Int4RowBytes(k) = 16 · ceil(k / 32)
//         bytes (missing inputs of the last block are 0). Scales and zeros bf16 [n, groups].
//
// The GEMM streams W once for small m (decode): threads split n, each dequantizes in registers
// (AVX-512 or AVX2 chosen at run time through kernels/cpu/isa.h, scalar fallback) and
// accumulates in f32. Larger m (prefill) dequantizes panels of W to f32 and multiplies them with
// GemmNT (kernels/cpu/gemm). OpenMP inside; inside a parallel region it runs on the calling
// thread.
#ifndef CCTUNE_KERNELS_CPU_QUANT_QUANT_H_
#define CCTUNE_KERNELS_CPU_QUANT_QUANT_H_

#include <cstdint>

#include "core/dtype.h"

namespace cctune::cpu {

enum class QuantFormat { kInt8PerChannel, kInt4Grouped };

inline constexpr int64_t kInt4BlockSize = 32;
inline constexpr int64_t kMinInt4GroupSize = 32;
inline constexpr int64_t kMaxInt4GroupSize = 256;

inline int64_t Int8RowBytes(int64_t k) { return (k + 3) / 4 * 4; }
inline int64_t Int4RowBytes(int64_t k) { return (k + kInt4BlockSize - 1) / kInt4BlockSize * 16; }
inline int64_t Int4Groups(int64_t k, int64_t groupsize) { return (k + groupsize - 1) / groupsize; }

// A quantized weight [n, k] in one of the formats above (views; nothing owned).
struct QuantMatrix {
  QuantFormat format = QuantFormat::kInt8PerChannel;
  int64_t n = 0, k = 0;
  int64_t groupsize = 0;        // int4 only
  const uint8_t* data = nullptr;  // n rows of Int8RowBytes(k) / Int4RowBytes(k) bytes
  const float* scales = nullptr;  // int8: [n]
  const bf16* scales4 = nullptr;  // int4: [n, groups]
  const bf16* zeros4 = nullptr;   // int4: [n, groups]
};

// W [n, k] of dtype w_dtype (kF32/kBF16/kF16, row stride ldw elements) -> q [n,
// Int8RowBytes(k)] (int8 bit patterns) and scales [n].
void QuantizeInt8(int64_t n, int64_t k, const void* w, DType w_dtype, int64_t ldw, uint8_t* q,
                  float* scales);
// W -> q [n, Int4RowBytes(k)], scales and zeros [n, Int4Groups(k, groupsize)]. groupsize: a
// multiple of 32 (CHECK; callers validate user input).
void QuantizeInt4(int64_t n, int64_t k, int64_t groupsize, const void* w, DType w_dtype,
                  int64_t ldw, uint8_t* q, bf16* scales, bf16* zeros);

// Rows [row0, row0 + rows) of dequant(W) into out [rows, k] (row stride ldo).
void Dequantize(const QuantMatrix& w, int64_t row0, int64_t rows, float* out, int64_t ldo);

// C[m, n] = A[m, k] · dequant(W)ᵀ (C overwritten). A, C: f32 rows with strides lda, ldc.
// Up to kMaxInt8ActRows / kMaxInt4ActRows rows of A, with QuantActivations::kInt8 (the
// default), A is first
// quantized per block of kActBlock inputs to int8 (scale max|x| / 127, round to nearest:
// llama.cpp's Q8_0 x Q8_0 and Q4_0 x Q8_0 dots) and the products summed in int32 (AVX-512 VNNI
// vpdpbusd; AVX2 vpmaddubsw; scalar) before one f32 scale per block (int8 weights) or per
// block of 32 (int4: the nibbles 0..15 against the int8 activations, the zero point applied
// once per group through Σ x).
void QuantGemmNT(int64_t m, const float* a, int64_t lda, const QuantMatrix& w, float* c,
                 int64_t ldc);

// How the int8 / int4 decode GEMV treats the activations: quantized to int8 per block (fast, the
// default) or kept in f32 (the accuracy reference: the error is then the weights' alone).
// Process-wide; the default comes from CCTUNE_QUANT_ACTIVATIONS=int8|f32 (read once).
enum class QuantActivations { kInt8, kF32 };
void SetQuantActivations(QuantActivations mode);
QuantActivations GetQuantActivations();

// Inputs per activation block of the int8-activation path (one 512-bit vector of int8).
inline constexpr int64_t kActBlock = 64;
// Rows of A [m, k] -> int8 values q [m, ldq] (ldq >= ceil(k / kActBlock) · kActBlock; the
// padding is 0) and scales d [m, ldd] (one per block): d = max|x| / 127 over the block (1 for
// an all-zero block), q = clamp(round(x / d), -127, 127). With `biased`, q + 128 is stored
// (as uint8, for vpdpbusd's unsigned operand).
void QuantizeActivations(int64_t m, int64_t k, const float* a, int64_t lda, bool biased,
                         int8_t* q, int64_t ldq, float* d, int64_t ldd);

namespace quant_internal {

enum class QuantIsa { kScalar, kAvx2, kAvx512 };
const char* QuantIsaName(QuantIsa isa);
// The streaming path the active ISA level (kernels/cpu/isa.h) selects.
QuantIsa BestQuantIsa();
// Up to this many rows of A the f32-activation streaming kernel runs; above, the
// dequantized-panel GEMM.
inline constexpr int64_t kMaxStreamRows = 8;
// Up to this many rows of A the int8-activation kernels run (QuantActivations::kInt8) for int4
// and int8 weights; above, the panels. Measured (quant_gemv_bench, 2 threads, [8192, 2048],
// noisy shared machine, in one process): int4 g32 at m = 16 / 64 / 128 / 512: 197 / 30 / 121 /
// 187 GFLOP/s against the panels' 33 / 13 / 103 / 207 (m = 128 again: 54 against 32); int8
// 252 / 33 / 112 / 192 against 111 / 20 / 142 / 232 (m = 128 again: 65 against 39).
inline constexpr int64_t kMaxInt4ActRows = 128;
inline constexpr int64_t kMaxInt8ActRows = 64;
// The streaming kernel with `isa` forced (must be supported: CHECK), for any m.
void StreamQuantGemmNT(QuantIsa isa, int64_t m, const float* a, int64_t lda, const QuantMatrix& w,
                       float* c, int64_t ldc);
// The int8-activation streaming kernel (int8 weights only) with `isa` forced.
enum class Int8ActIsa { kScalar, kAvx2, kAvx512Vnni };
const char* Int8ActIsaName(Int8ActIsa isa);
Int8ActIsa BestInt8ActIsa();
void StreamInt8ActGemmNT(Int8ActIsa isa, int64_t m, const float* a, int64_t lda,
                         const QuantMatrix& w, float* c, int64_t ldc);
// The int8-activation streaming kernel for int4 weights with `isa` forced (same paths).
void StreamInt4ActGemmNT(Int8ActIsa isa, int64_t m, const float* a, int64_t lda,
                         const QuantMatrix& w, float* c, int64_t ldc);
// The panel path for any m.
void PanelQuantGemmNT(int64_t m, const float* a, int64_t lda, const QuantMatrix& w, float* c,
                      int64_t ldc);

}  // namespace quant_internal
}  // namespace cctune::cpu

#endif  // CCTUNE_KERNELS_CPU_QUANT_QUANT_H_
