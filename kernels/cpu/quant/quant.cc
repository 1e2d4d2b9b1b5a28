#include "kernels/cpu/quant/quant.h"

// GCC 12's AVX-512 intrinsic headers trip a false -Wmaybe-uninitialized (GCC PR105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/cpu/gemm/gemm.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/simd_targets.h"
#include "kernels/cpu/thread_pool.h"

// Each SIMD path is compiled for its own instruction set (kernels/cpu/simd_targets.h), so this
// file builds with any -march and the paths are picked at run time (kernels/cpu/isa.h).
#define CCTUNE_QTARGET_AVX2 CCTUNE_TARGET_AVX2
#define CCTUNE_QTARGET_AVX512 CCTUNE_TARGET_AVX512
#define CCTUNE_QINLINE CCTUNE_INLINE
#define CCTUNE_QTARGET_AVX512VNNI CCTUNE_TARGET_AVX512VNNI

namespace cctune::cpu {

using quant_internal::QuantIsa;

namespace {

// Below this many multiply-adds a call runs on one thread (fork/join would dominate).
constexpr int64_t kMinParallelMacs = 1 << 15;
// Rows of W each thread takes at a time (a multiple of 8 keeps threads off each other's
// cache lines of C for m = 1).
constexpr int64_t kRowBlock = 16;
// f32 panel of dequantized rows the prefill path multiplies at once (per thread).
constexpr int64_t kPanelBytes = 1 << 20;
// Bytes of W ahead of the int8-activation kernels' loads to prefetch (one line per 64 bytes of
// W read; about two rows of a k = 2048 int4 matrix ahead). Measured (quant_gemv_bench, 1
// thread, Sapphire Rapids, DRAM): int4 g32 decode 8.6 GB/s without, 7.4 at 256 B, 9.6 at
// 1 KiB, 10.1 at 2 and 4 KiB (bf16 GemmNT 10.5).
constexpr int64_t kQuantPrefetchBytes = 2048;

float LoadAsFloat(const void* w, DType t, int64_t i) {
  switch (t) {
    case DType::kBF16:
      return Bf16ToFloat(static_cast<const bf16*>(w)[i]);
    case DType::kF16:
      return F16ToFloat(static_cast<const f16*>(w)[i]);
    default:
      return static_cast<const float*>(w)[i];
  }
}

// The 4-bit value of input t (0..31) of a packed block.
CCTUNE_QINLINE int Nibble(const uint8_t* block, int64_t t) {
  const uint8_t byte = block[t & 15];
  return t < 16 ? (byte & 15) : (byte >> 4);
}

// Blocks [b0, b1) of 32 inputs in the group g of a row.
CCTUNE_QINLINE void GroupBlocks(const QuantMatrix& w, int64_t g, int64_t* b0, int64_t* b1) {
  const int64_t per = w.groupsize / kInt4BlockSize;
  *b0 = g * per;
  *b1 = std::min((g + 1) * per, (w.k + kInt4BlockSize - 1) / kInt4BlockSize);
}

// Σ_t nibble_t · a_t over the first `len` inputs of one block.
CCTUNE_QINLINE float BlockDotScalar(const uint8_t* block, const float* a, int64_t len) {
  float s = 0.f;
  for (int64_t t = 0; t < len; ++t) s += static_cast<float>(Nibble(block, t)) * a[t];
  return s;
}

// Per row of A, the sum of its inputs over each group: [m, groups]. The int4 dot splits as
// Σ (q - 8)·s·x + z·x = s · Σ q·x + (z - 8·s) · Σ x.
void GroupSums(int64_t m, const float* a, int64_t lda, const QuantMatrix& w, float* xs) {
  const int64_t groups = Int4Groups(w.k, w.groupsize);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t q0 = g * w.groupsize, q1 = std::min(w.k, q0 + w.groupsize);
      float s = 0.f;
      for (int64_t q = q0; q < q1; ++q) s += a[i * lda + q];
      xs[i * groups + g] = s;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Scalar path.

void ScalarInt8Rows(int64_t m, const float* a, int64_t lda, const QuantMatrix& w, int64_t j0,
                    int64_t j1, float* c, int64_t ldc) {
  const int64_t rb = Int8RowBytes(w.k);
  for (int64_t j = j0; j < j1; ++j) {
    const int8_t* b = reinterpret_cast<const int8_t*>(w.data + j * rb);
    for (int64_t i = 0; i < m; ++i) {
      const float* ai = a + i * lda;
      float s[4] = {0.f, 0.f, 0.f, 0.f};
      int64_t q = 0;
      for (; q + 4 <= w.k; q += 4) {
        for (int u = 0; u < 4; ++u) s[u] += ai[q + u] * static_cast<float>(b[q + u]);
      }
      for (; q < w.k; ++q) s[0] += ai[q] * static_cast<float>(b[q]);
      c[i * ldc + j] = w.scales[j] * ((s[0] + s[1]) + (s[2] + s[3]));
    }
  }
}

void ScalarInt4Rows(int64_t m, const float* a, int64_t lda, const QuantMatrix& w, const float* xs,
                    int64_t j0, int64_t j1, float* c, int64_t ldc) {
  const int64_t rb = Int4RowBytes(w.k), groups = Int4Groups(w.k, w.groupsize);
  for (int64_t j = j0; j < j1; ++j) {
    const uint8_t* row = w.data + j * rb;
    for (int64_t i = 0; i < m; ++i) {
      const float* ai = a + i * lda;
      float total = 0.f;
      for (int64_t g = 0; g < groups; ++g) {
        int64_t b0, b1;
        GroupBlocks(w, g, &b0, &b1);
        float acc = 0.f;
        for (int64_t blk = b0; blk < b1; ++blk) {
          const int64_t len = std::min(kInt4BlockSize, w.k - blk * kInt4BlockSize);
          acc += BlockDotScalar(row + blk * 16, ai + blk * kInt4BlockSize, len);
        }
        const float s = Bf16ToFloat(w.scales4[j * groups + g]);
        const float z = Bf16ToFloat(w.zeros4[j * groups + g]);
        total += s * acc + (z - 8.f * s) * xs[i * groups + g];
      }
      c[i * ldc + j] = total;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// AVX2 path: 8 lanes.

CCTUNE_QTARGET_AVX2 CCTUNE_QINLINE float Avx2Sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// MR rows of A times one int8 row of W, U independent accumulators per row.
template <int MR, int U>
CCTUNE_QTARGET_AVX2 void Avx2Int8Tile(int64_t k, const float* a, int64_t lda, const int8_t* b,
                                      float scale, float* c, int64_t ldc) {
  __m256 acc[U][MR];
  for (int u = 0; u < U; ++u) {
    for (int i = 0; i < MR; ++i) acc[u][i] = _mm256_setzero_ps();
  }
  int64_t q = 0;
  for (; q + 8 * U <= k; q += 8 * U) {
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) {
      const __m256 bv = _mm256_cvtepi32_ps(
          _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + q + 8 * u))));
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        acc[u][i] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i * lda + q + 8 * u), bv, acc[u][i]);
      }
    }
  }
  for (; q + 8 <= k; q += 8) {
    const __m256 bv = _mm256_cvtepi32_ps(
        _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + q))));
    for (int i = 0; i < MR; ++i) {
      acc[0][i] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i * lda + q), bv, acc[0][i]);
    }
  }
  for (int i = 0; i < MR; ++i) {
    __m256 v = acc[0][i];
    for (int u = 1; u < U; ++u) v = _mm256_add_ps(v, acc[u][i]);
    float s = Avx2Sum(v);
    for (int64_t t = q; t < k; ++t) s += a[i * lda + t] * static_cast<float>(b[t]);
    c[i * ldc] = scale * s;
  }
}

// MR rows of A times one int4 row of W.
template <int MR>
CCTUNE_QTARGET_AVX2 void Avx2Int4Tile(const QuantMatrix& w, const float* a, int64_t lda,
                                      const uint8_t* row, const bf16* scales, const bf16* zeros,
                                      const float* xs, int64_t groups, float* c, int64_t ldc) {
  const __m256i low = _mm256_set1_epi32(15);
  const int64_t full = w.k / kInt4BlockSize;
  __m256 total[2][MR];
  float extra[MR];
  for (int i = 0; i < MR; ++i) {
    total[0][i] = total[1][i] = _mm256_setzero_ps();
    extra[i] = 0.f;
  }
  for (int64_t g = 0; g < groups; ++g) {
    int64_t b0, b1;
    GroupBlocks(w, g, &b0, &b1);
    __m256 acc[2][MR];
    float tail[MR];
    for (int i = 0; i < MR; ++i) {
      acc[0][i] = acc[1][i] = _mm256_setzero_ps();
      tail[i] = 0.f;
    }
    for (int64_t blk = b0; blk < b1; ++blk) {
      const uint8_t* bp = row + blk * 16;
      const float* ap = a + blk * kInt4BlockSize;
      if (blk >= full) {
        for (int i = 0; i < MR; ++i) {
          tail[i] += BlockDotScalar(bp, ap + i * lda, w.k - blk * kInt4BlockSize);
        }
        continue;
      }
      const __m256i v0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(bp)));
      const __m256i v1 =
          _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(bp + 8)));
      const __m256 q0 = _mm256_cvtepi32_ps(_mm256_and_si256(v0, low));   // inputs 0..7
      const __m256 q1 = _mm256_cvtepi32_ps(_mm256_and_si256(v1, low));   // 8..15
      const __m256 q2 = _mm256_cvtepi32_ps(_mm256_srli_epi32(v0, 4));    // 16..23
      const __m256 q3 = _mm256_cvtepi32_ps(_mm256_srli_epi32(v1, 4));    // 24..31
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        const float* ai = ap + i * lda;
        acc[0][i] = _mm256_fmadd_ps(q0, _mm256_loadu_ps(ai), acc[0][i]);
        acc[1][i] = _mm256_fmadd_ps(q1, _mm256_loadu_ps(ai + 8), acc[1][i]);
        acc[0][i] = _mm256_fmadd_ps(q2, _mm256_loadu_ps(ai + 16), acc[0][i]);
        acc[1][i] = _mm256_fmadd_ps(q3, _mm256_loadu_ps(ai + 24), acc[1][i]);
      }
    }
    const float s = Bf16ToFloat(scales[g]), z = Bf16ToFloat(zeros[g]);
    const __m256 sv = _mm256_set1_ps(s);
    for (int i = 0; i < MR; ++i) {
      total[g & 1][i] = _mm256_fmadd_ps(_mm256_add_ps(acc[0][i], acc[1][i]), sv, total[g & 1][i]);
      extra[i] += s * tail[i] + (z - 8.f * s) * xs[i * groups + g];
    }
  }
  for (int i = 0; i < MR; ++i) {
    c[i * ldc] = Avx2Sum(_mm256_add_ps(total[0][i], total[1][i])) + extra[i];
  }
}

// ---------------------------------------------------------------------------------------------
// AVX-512 path: 16 lanes.

template <int MR, int U>
CCTUNE_QTARGET_AVX512 void Avx512Int8Tile(int64_t k, const float* a, int64_t lda, const int8_t* b,
                                          float scale, float* c, int64_t ldc) {
  __m512 acc[U][MR];
  for (int u = 0; u < U; ++u) {
    for (int i = 0; i < MR; ++i) acc[u][i] = _mm512_setzero_ps();
  }
  int64_t q = 0;
  for (; q + 16 * U <= k; q += 16 * U) {
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) {
      const __m512 bv = _mm512_cvtepi32_ps(
          _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + q + 16 * u))));
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        acc[u][i] = _mm512_fmadd_ps(_mm512_loadu_ps(a + i * lda + q + 16 * u), bv, acc[u][i]);
      }
    }
  }
  for (; q < k; q += 16) {  // masked: no read past the row of A or W
    const __mmask16 mk =
        k - q >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (k - q)) - 1);
    const __m512 bv = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mk, b + q)));
    for (int i = 0; i < MR; ++i) {
      acc[0][i] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, a + i * lda + q), bv, acc[0][i]);
    }
  }
  for (int i = 0; i < MR; ++i) {
    __m512 v = acc[0][i];
    for (int u = 1; u < U; ++u) v = _mm512_add_ps(v, acc[u][i]);
    c[i * ldc] = scale * _mm512_reduce_add_ps(v);
  }
}

template <int MR>
CCTUNE_QTARGET_AVX512 void Avx512Int4Tile(const QuantMatrix& w, const float* a, int64_t lda,
                                          const uint8_t* row, const bf16* scales,
                                          const bf16* zeros, const float* xs, int64_t groups,
                                          float* c, int64_t ldc) {
  const __m512i low = _mm512_set1_epi32(15);
  const int64_t full = w.k / kInt4BlockSize;
  __m512 total[2][MR];
  float extra[MR];
  for (int i = 0; i < MR; ++i) {
    total[0][i] = total[1][i] = _mm512_setzero_ps();
    extra[i] = 0.f;
  }
  for (int64_t g = 0; g < groups; ++g) {
    int64_t b0, b1;
    GroupBlocks(w, g, &b0, &b1);
    __m512 acc[2][MR];
    float tail[MR];
    for (int i = 0; i < MR; ++i) {
      acc[0][i] = acc[1][i] = _mm512_setzero_ps();
      tail[i] = 0.f;
    }
    for (int64_t blk = b0; blk < b1; ++blk) {
      const uint8_t* bp = row + blk * 16;
      const float* ap = a + blk * kInt4BlockSize;
      if (blk >= full) {
        for (int i = 0; i < MR; ++i) {
          tail[i] += BlockDotScalar(bp, ap + i * lda, w.k - blk * kInt4BlockSize);
        }
        continue;
      }
      const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bp)));
      const __m512 lo = _mm512_cvtepi32_ps(_mm512_and_si512(v, low));  // inputs 0..15
      const __m512 hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4));   // 16..31
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        const float* ai = ap + i * lda;
        acc[0][i] = _mm512_fmadd_ps(lo, _mm512_loadu_ps(ai), acc[0][i]);
        acc[1][i] = _mm512_fmadd_ps(hi, _mm512_loadu_ps(ai + 16), acc[1][i]);
      }
    }
    const float s = Bf16ToFloat(scales[g]), z = Bf16ToFloat(zeros[g]);
    const __m512 sv = _mm512_set1_ps(s);
    for (int i = 0; i < MR; ++i) {
      total[g & 1][i] = _mm512_fmadd_ps(_mm512_add_ps(acc[0][i], acc[1][i]), sv, total[g & 1][i]);
      extra[i] += s * tail[i] + (z - 8.f * s) * xs[i * groups + g];
    }
  }
  for (int i = 0; i < MR; ++i) {
    c[i * ldc] = _mm512_reduce_add_ps(_mm512_add_ps(total[0][i], total[1][i])) + extra[i];
  }
}

// ---------------------------------------------------------------------------------------------
// Int8 activations x int8 weights (llama.cpp's Q8_0 x Q8_0 way). Each block of kActBlock inputs
// sums its products exactly in int32; the block's sum is then scaled by the activation block's
// d in f32, and the row's total by the weight row's scale.

// Quantized rows of A: q [rows, ldq] (int8, or biased uint8 for VNNI), d [rows, ldd], `blocks`
// blocks per row. Row r of a view starts at q + r·ldq and d + r·ldd.
struct ActRows {
  const int8_t* q;
  int64_t ldq;
  const float* d;
  int64_t ldd;
  int64_t blocks;
  ActRows Offset(int64_t r) const { return {q + r * ldq, ldq, d + r * ldd, ldd, blocks}; }
};

template <int MR>
void ScalarInt8ActTile(int64_t k, const ActRows& x, const int8_t* b, float scale, float* c,
                       int64_t ldc) {
  for (int i = 0; i < MR; ++i) {
    const int8_t* xq = x.q + i * x.ldq;
    float total = 0.f;
    for (int64_t blk = 0; blk < x.blocks; ++blk) {
      const int64_t q1 = std::min(k, (blk + 1) * kActBlock);
      int32_t sum = 0;
      for (int64_t q = blk * kActBlock; q < q1; ++q) sum += int32_t{xq[q]} * int32_t{b[q]};
      total += x.d[i * x.ldd + blk] * static_cast<float>(sum);
    }
    c[i * ldc] = scale * total;
  }
}

// AVX2: |x| (unsigned) times w with x's sign (signed) through vpmaddubsw: each int16 pair sum
// is at most 2 · 127 · 127 < 2^15, so nothing saturates (x and w never hold -128). A block of
// 64 is two such products, vpmaddwd each to int32 and one add; then one convert and one FMA
// with the block's d per row of A. Whole blocks go two at a time into two accumulators (the
// FMA's latency, not its throughput, bounded one accumulator), W's next lines prefetched as
// the VNNI kernel does; only the row's last, partial block is copied out (no read past W).
CCTUNE_QTARGET_AVX2 CCTUNE_QINLINE __m256i Avx2Int8Block64(__m256i w0, __m256i w1,
                                                          const int8_t* xq) {
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
  const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32));
  const __m256i p0 = _mm256_maddubs_epi16(_mm256_sign_epi8(x0, x0), _mm256_sign_epi8(w0, x0));
  const __m256i p1 = _mm256_maddubs_epi16(_mm256_sign_epi8(x1, x1), _mm256_sign_epi8(w1, x1));
  return _mm256_add_epi32(_mm256_madd_epi16(p0, ones), _mm256_madd_epi16(p1, ones));
}

template <int MR>
CCTUNE_QTARGET_AVX2 CCTUNE_QINLINE void Avx2Int8ActBlockRows(const ActRows& x, const int8_t* w,
                                                             int64_t blk, __m256* acc) {
  const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
  const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 32));
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
    const __m256i s = Avx2Int8Block64(w0, w1, x.q + i * x.ldq + blk * kActBlock);
    acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_broadcast_ss(x.d + i * x.ldd + blk),
                             acc[i]);
  }
}

template <int MR>
CCTUNE_QTARGET_AVX2 void Avx2Int8ActTile(int64_t k, const ActRows& x, const int8_t* b,
                                         float scale, float* c, int64_t ldc) {
  __m256 acc0[MR], acc1[MR];
  for (int i = 0; i < MR; ++i) acc0[i] = acc1[i] = _mm256_setzero_ps();
  const int64_t full = k / kActBlock;  // blocks whose 64 bytes all lie in W's row
  int64_t blk = 0;
  for (; blk + 2 <= full; blk += 2) {
    const int8_t* w = b + blk * kActBlock;
    _mm_prefetch(reinterpret_cast<const char*>(w) + kQuantPrefetchBytes, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(w) + kQuantPrefetchBytes + 64, _MM_HINT_T0);
    Avx2Int8ActBlockRows<MR>(x, w, blk, acc0);
    Avx2Int8ActBlockRows<MR>(x, w + kActBlock, blk + 1, acc1);
  }
  if (blk < full) Avx2Int8ActBlockRows<MR>(x, b + blk * kActBlock, blk, acc0), ++blk;
  if (blk < x.blocks) {  // the row's last bytes (the activations' padding is 0)
    alignas(32) int8_t tail[kActBlock] = {};
    std::copy(b + blk * kActBlock, b + k, tail);
    Avx2Int8ActBlockRows<MR>(x, tail, blk, acc1);
  }
  for (int i = 0; i < MR; ++i) c[i * ldc] = scale * Avx2Sum(_mm256_add_ps(acc0[i], acc1[i]));
}

// AVX-512 VNNI: vpdpbusd multiplies unsigned by signed bytes, so the activations come biased
// (x + 128); Σ (x + 128)·w - 128·Σ w = Σ x·w, with 128·Σ w from a second vpdpbusd shared by the
// MR rows of A. A lane sums 4 products of at most 255 · 127: far inside int32.
template <int MR>
CCTUNE_QTARGET_AVX512VNNI void Avx512VnniInt8ActTile(int64_t k, const ActRows& x,
                                                     const int8_t* b, float scale, float* c,
                                                     int64_t ldc) {
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[MR];
  for (int i = 0; i < MR; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t blk = 0; blk < x.blocks; ++blk) {
    const int64_t q = blk * kActBlock;
    _mm_prefetch(reinterpret_cast<const char*>(b + q) + kQuantPrefetchBytes, _MM_HINT_T0);
    const __m512i wv =
        q + kActBlock <= k
            ? _mm512_loadu_si512(b + q)
            : _mm512_maskz_loadu_epi8((__mmask64{1} << (k - q)) - 1, b + q);  // no read past W
    const __m512i corr = _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, wv);
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      const __m512i xv = _mm512_loadu_si512(x.q + i * x.ldq + q);
      const __m512i p =
          _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), xv, wv), corr);
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_set1_ps(x.d[i * x.ldd + blk]),
                               acc[i]);
    }
  }
  for (int i = 0; i < MR; ++i) c[i * ldc] = scale * _mm512_reduce_add_ps(acc[i]);
}

// Rows [j0, j1) of W against the m quantized rows of A, 4 rows of A per pass over a W row.
template <template <int> class Tile>
void Int8ActRows(int64_t m, const ActRows& x, const QuantMatrix& w, int64_t j0, int64_t j1,
                 float* c, int64_t ldc) {
  const int64_t rb = Int8RowBytes(w.k);
  for (int64_t j = j0; j < j1; ++j) {
    const int8_t* b = reinterpret_cast<const int8_t*>(w.data + j * rb);
    int64_t i = 0;
    for (; i + 4 <= m; i += 4) Tile<4>::Run(w.k, x.Offset(i), b, w.scales[j], c + i * ldc + j, ldc);
    for (; i < m; ++i) Tile<1>::Run(w.k, x.Offset(i), b, w.scales[j], c + i * ldc + j, ldc);
  }
}
template <int MR>
struct ScalarAct {
  static void Run(int64_t k, const ActRows& x, const int8_t* b, float s, float* c, int64_t ldc) {
    ScalarInt8ActTile<MR>(k, x, b, s, c, ldc);
  }
};
template <int MR>
struct Avx2Act {
  static void Run(int64_t k, const ActRows& x, const int8_t* b, float s, float* c, int64_t ldc) {
    Avx2Int8ActTile<MR>(k, x, b, s, c, ldc);
  }
};
template <int MR>
struct VnniAct {
  static void Run(int64_t k, const ActRows& x, const int8_t* b, float s, float* c, int64_t ldc) {
    Avx512VnniInt8ActTile<MR>(k, x, b, s, c, ldc);
  }
};

// ---------------------------------------------------------------------------------------------
// Int4 weights x int8 activations. The activations are quantized as for int8 weights (blocks of
// kActBlock = 64, QuantizeActivations); each block of 32 weights sums q·x_q exactly in int32
// with the nibbles q = 0..15 as the unsigned operand (no bias), and the group's terms are
// scaled by the activation block's d and the group's scale in f32. The zero point enters once
// per group: Σ ((q - 8)·s + z)·d·x_q = s · Σ q·d·x_q + (z - 8·s) · xs, with xs = Σ d·x_q over
// the group (per row of A, once per call). The result is the dot product of the stored weights
// with the quantized activations, up to f32 rounding.

// Quantized rows of A for the int4 kernels: q [rows, ldq] int8 (in the kernel's order, below;
// ldq a multiple of 128, zero-padded), d [rows, ldd] one per block of 64, xs [rows, ldxs] per
// group of W, and for the VNNI kernel dv [rows, lddv]: per 128 inputs 16 lanes of d (below).
struct Int4ActRows {
  const int8_t* q;
  int64_t ldq;
  const float* d;
  int64_t ldd;
  const float* xs;
  int64_t ldxs;
  const float* dv;
  int64_t lddv;
  Int4ActRows Offset(int64_t r) const {
    return {q + r * ldq, ldq, d + r * ldd, ldd, xs + r * ldxs, ldxs, dv + r * lddv, lddv};
  }
};

// The VNNI kernel reads W in spans of 128 inputs (4 blocks A, B, C, D: one 64-byte line) and
// unpacks a span into two vectors, the low nibbles [A 0..15, B 0..15, C 0..15, D 0..15] and the
// high ones [A 16..31, B 16..31, ...], i.e. the inputs 0..15, 32..47, 64..79, 96..111 and
// 16..31, 48..63, 80..95, 112..127 of the span. The activations are stored in that order (128
// bytes per span) so that byte t of both operands is the same input.
constexpr int64_t kVnniSpan = 128;
CCTUNE_QINLINE int64_t VnniSpanSource(int64_t t) {
  const int64_t half = t / 64, quarter = (t % 64) / 16;
  return quarter * kInt4BlockSize + half * 16 + t % 16;
}

// The int32 sum Σ q·x of one block of 32 nibbles against 32 int8 activations (natural order).
CCTUNE_QINLINE int32_t Int4BlockDotInt(const uint8_t* block, const int8_t* x) {
  int32_t s = 0;
  for (int t = 0; t < 16; ++t) {
    s += int32_t{static_cast<uint8_t>(block[t] & 15)} * x[t] +
         int32_t{static_cast<uint8_t>(block[t] >> 4)} * x[t + 16];
  }
  return s;
}

template <int MR>
void ScalarInt4ActTile(const QuantMatrix& w, const Int4ActRows& x, const uint8_t* row,
                       const bf16* scales, const bf16* zeros, int64_t groups, float* c,
                       int64_t ldc) {
  for (int i = 0; i < MR; ++i) {
    const int8_t* xq = x.q + i * x.ldq;
    float total = 0.f;
    for (int64_t g = 0; g < groups; ++g) {
      int64_t b0, b1;
      GroupBlocks(w, g, &b0, &b1);
      float acc = 0.f;
      for (int64_t blk = b0; blk < b1; ++blk) {
        acc += x.d[i * x.ldd + blk / 2] *
               static_cast<float>(Int4BlockDotInt(row + blk * 16, xq + blk * kInt4BlockSize));
      }
      const float s = Bf16ToFloat(scales[g]), z = Bf16ToFloat(zeros[g]);
      total += s * acc + (z - 8.f * s) * x.xs[i * x.ldxs + g];
    }
    c[i * ldc] = total;
  }
}

// AVX2: one pair of blocks of 32 per step (32 bytes of W, the 64 inputs of one activation
// block): the low nibbles (vpand) are inputs 0..15 of both blocks, the high ones (vpsrlw +
// vpand) inputs 16..31, and the activations are stored in that order (per 64 inputs the
// 16-byte runs 0, 2, 1, 3: Avx2Int4ActOrder). vpmaddubsw of the unsigned nibbles with the
// signed activations twice (a pair sums at most 2 · 15 · 127, and the two products' sum 7620
// fits int16), one vpaddw, one vpmaddwd to int32: lanes 0-3 hold block A's partial sums, 4-7
// block B's. Then one convert and one FMA with (activation d) x (the lanes' group scales:
// one 32-bit load of the two bf16 scales at groupsize 32, one scale broadcast at 64..256).
// The zero points enter 8 groups per step at the end.
CCTUNE_QTARGET_AVX2 CCTUNE_QINLINE __m256 Avx2Bf16x8ToF32(const bf16* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(
      _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}

// Source of byte t (0..63) of an activation block in the AVX2 kernel's order.
CCTUNE_QINLINE int64_t Avx2Int4ActOrder(int64_t t) {
  static constexpr int64_t kRun[4] = {0, 2, 1, 3};
  return kRun[t / 16] * 16 + t % 16;
}

// The f32 group scales of blocks blk (lanes 0-3) and blk + 1 (lanes 4-7, 0 when !second).
// kShift: log2 of the blocks per group (0: groupsize 32, ... 3: 256), or -1 for any other
// multiple of 32 (a division per pair: the slow path of rare groupsizes such as 96).
template <int kShift>
CCTUNE_QTARGET_AVX2 CCTUNE_QINLINE __m256 Avx2PairScales(const bf16* scales, int64_t blk,
                                                         int64_t bpg, bool second) {
  if (kShift > 0) {  // groupsize 64..256: both blocks of a pair lie in one group
    return _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int32_t>(
        uint32_t{scales[blk >> (kShift > 0 ? kShift : 0)].bits} << 16)));
  }
  uint32_t pair;
  if (kShift == 0 && second) {
    std::memcpy(&pair, scales + blk, sizeof(pair));  // little-endian: A low, B high
  } else {
    const uint32_t a = scales[kShift >= 0 ? blk >> kShift : blk / bpg].bits;
    const uint32_t b =
        second ? scales[kShift >= 0 ? (blk + 1) >> kShift : (blk + 1) / bpg].bits : 0u;
    pair = a | b << 16;
  }
  const __m256i v = _mm256_set1_epi32(static_cast<int32_t>(pair));
  const __m256i shift = _mm256_setr_epi32(16, 16, 16, 16, 0, 0, 0, 0);
  return _mm256_castsi256_ps(
      _mm256_and_si256(_mm256_sllv_epi32(v, shift), _mm256_set1_epi32(int32_t(0xFFFF0000u))));
}

// Pair pr (blocks 2pr, 2pr + 1; wv its 32 bytes of W) into a[MR] with the lanes' scales sv.
template <int MR>
CCTUNE_QTARGET_AVX2 CCTUNE_QINLINE void Avx2Int4ActPair(const Int4ActRows& x, __m256i wv,
                                                        int64_t pr, __m256 sv, __m256* a) {
  const __m256i mask = _mm256_set1_epi8(15);
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i lo = _mm256_and_si256(wv, mask);
  const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(wv, 4), mask);
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
    const int8_t* xq = x.q + i * x.ldq + pr * kActBlock;
    const __m256i p16 = _mm256_add_epi16(
        _mm256_maddubs_epi16(lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq))),
        _mm256_maddubs_epi16(hi, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32))));
    a[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones)),
                           _mm256_mul_ps(sv, _mm256_broadcast_ss(x.d + i * x.ldd + pr)), a[i]);
  }
}

template <int MR, int kShift>
CCTUNE_QTARGET_AVX2 void Avx2Int4ActTileShift(const QuantMatrix& w, const Int4ActRows& x,
                                              const uint8_t* row, const bf16* scales,
                                              const bf16* zeros, int64_t groups, float* c,
                                              int64_t ldc) {
  const int64_t blocks = (w.k + kInt4BlockSize - 1) / kInt4BlockSize, pairs = blocks / 2;
  const int64_t bpg = w.groupsize / kInt4BlockSize;
  __m256 acc[2][MR];
  for (int i = 0; i < MR; ++i) acc[0][i] = acc[1][i] = _mm256_setzero_ps();
  int64_t pr = 0;
  for (; pr + 2 <= pairs; pr += 2) {  // two accumulators (FMA latency); one 64-byte line
    const uint8_t* wp = row + pr * 32;
    _mm_prefetch(reinterpret_cast<const char*>(wp) + kQuantPrefetchBytes, _MM_HINT_T0);
    Avx2Int4ActPair<MR>(x, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp)), pr,
                        Avx2PairScales<kShift>(scales, 2 * pr, bpg, true), acc[0]);
    Avx2Int4ActPair<MR>(x, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp + 32)), pr + 1,
                        Avx2PairScales<kShift>(scales, 2 * pr + 2, bpg, true), acc[1]);
  }
  if (pr < pairs) {
    Avx2Int4ActPair<MR>(x, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + pr * 32)),
                        pr, Avx2PairScales<kShift>(scales, 2 * pr, bpg, true), acc[0]);
    ++pr;
  }
  if (blocks % 2 != 0) {  // the row's last block alone: 16 bytes (no read past W), B's lanes 0
    const __m256i wv = _mm256_zextsi128_si256(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + pr * 32)));
    Avx2Int4ActPair<MR>(x, wv, pr, Avx2PairScales<kShift>(scales, 2 * pr, bpg, false), acc[1]);
  }
  // Zero points: Σ_g (z_g - 8·s_g) · xs_g.
  const __m256 eight = _mm256_set1_ps(8.f);
  int64_t g = 0;
  for (; g + 8 <= groups; g += 8) {
    const __m256 zz = _mm256_fnmadd_ps(eight, Avx2Bf16x8ToF32(scales + g),
                                       Avx2Bf16x8ToF32(zeros + g));
    for (int i = 0; i < MR; ++i) {
      acc[0][i] = _mm256_fmadd_ps(zz, _mm256_loadu_ps(x.xs + i * x.ldxs + g), acc[0][i]);
    }
  }
  for (int i = 0; i < MR; ++i) {
    float zt = 0.f;
    for (int64_t r = g; r < groups; ++r) {
      const float s = Bf16ToFloat(scales[r]), z = Bf16ToFloat(zeros[r]);
      zt += (z - 8.f * s) * x.xs[i * x.ldxs + r];
    }
    c[i * ldc] = Avx2Sum(_mm256_add_ps(acc[0][i], acc[1][i])) + zt;
  }
}

template <int MR>
CCTUNE_QTARGET_AVX2 void Avx2Int4ActTile(const QuantMatrix& w, const Int4ActRows& x,
                                         const uint8_t* row, const bf16* scales,
                                         const bf16* zeros, int64_t groups, float* c,
                                         int64_t ldc) {
  switch (w.groupsize) {
    case 32:
      return Avx2Int4ActTileShift<MR, 0>(w, x, row, scales, zeros, groups, c, ldc);
    case 64:
      return Avx2Int4ActTileShift<MR, 1>(w, x, row, scales, zeros, groups, c, ldc);
    case 128:
      return Avx2Int4ActTileShift<MR, 2>(w, x, row, scales, zeros, groups, c, ldc);
    case 256:
      return Avx2Int4ActTileShift<MR, 3>(w, x, row, scales, zeros, groups, c, ldc);
    default:
      return Avx2Int4ActTileShift<MR, -1>(w, x, row, scales, zeros, groups, c, ldc);
  }
}

// AVX-512 VNNI: one span of 128 inputs (64 bytes of W) per step: one load, the low nibbles
// (vpandd) and the high ones (vpsrlw + vpandd), and per row of A two vpdpbusd (the nibbles as
// the unsigned operand, the int8 activations signed) into one int32 vector. Lane l sums the 8
// products of inputs of block l / 4 of the span (at most 8 · 15 · 127): lanes 0-7 lie in the
// span's first activation block of 64, lanes 8-15 in its second, and dv holds d that way.
// Then one convert and one FMA with (activation d) x (the lanes' weight scales) per row.
CCTUNE_QTARGET_AVX512VNNI CCTUNE_QINLINE void VnniInt4Span(const uint8_t* row, int64_t sp,
                                                         int64_t blocks, __m512i* lo,
                                                         __m512i* hi) {
  const __m512i mask = _mm512_set1_epi8(15);
  const uint8_t* p = row + sp * 64;
  _mm_prefetch(reinterpret_cast<const char*>(p) + kQuantPrefetchBytes, _MM_HINT_T0);
  const int64_t nb = blocks - 4 * sp;  // blocks in this span: 4, or 1..3 at the row's end
  const __m512i raw = nb >= 4 ? _mm512_loadu_si512(p)
                              : _mm512_maskz_loadu_epi8((__mmask64{1} << (16 * nb)) - 1, p);
  *lo = _mm512_and_si512(raw, mask);
  *hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), mask);
}

CCTUNE_QTARGET_AVX512VNNI CCTUNE_QINLINE __m512 Bf16x16ToF32(__m256i v) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
}

// The zero-point term Σ_g (z_g - 8·s_g) · xs_g, 16 groups per step, into acc.
template <int MR>
CCTUNE_QTARGET_AVX512VNNI CCTUNE_QINLINE void VnniInt4ZeroTerm(const Int4ActRows& x,
                                                               const bf16* scales,
                                                               const bf16* zeros, int64_t groups,
                                                               __m512* acc) {
  const __m512 eight = _mm512_set1_ps(8.f);
  for (int64_t g = 0; g < groups; g += 16) {
    const __mmask16 mk =
        groups - g >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (groups - g)) - 1);
    const __m512 sv = Bf16x16ToF32(_mm256_maskz_loadu_epi16(mk, scales + g));
    const __m512 zv = Bf16x16ToF32(_mm256_maskz_loadu_epi16(mk, zeros + g));
    const __m512 zz = _mm512_fnmadd_ps(eight, sv, zv);
    for (int i = 0; i < MR; ++i) {
      acc[i] = _mm512_fmadd_ps(zz, _mm512_maskz_loadu_ps(mk, x.xs + i * x.ldxs + g), acc[i]);
    }
  }
}

// One span into a[MR] with the lanes' weight scales sv.
template <int MR>
CCTUNE_QTARGET_AVX512VNNI CCTUNE_QINLINE void VnniInt4SpanRows(const Int4ActRows& x,
                                                             const uint8_t* row, int64_t sp,
                                                             int64_t blocks, __m512 sv,
                                                             __m512* a) {
  __m512i lo, hi;
  VnniInt4Span(row, sp, blocks, &lo, &hi);
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
    const int8_t* xq = x.q + i * x.ldq + sp * kVnniSpan;
    __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512(xq));
    p = _mm512_dpbusd_epi32(p, hi, _mm512_loadu_si512(xq + 64));
    a[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p),
                           _mm512_mul_ps(sv, _mm512_loadu_ps(x.dv + i * x.lddv + sp * 16)), a[i]);
  }
}

// Word indices for vpermw: dword lane l takes bf16 scale number l / kLanes into its high half
// (the low half zeroed by the mask): groupsize 32 (4 groups per span), 64 (2), 128 and 256 (1).
template <int kLanes>
CCTUNE_QTARGET_AVX512VNNI CCTUNE_QINLINE __m512i ScaleWordIndex() {
  alignas(64) static const auto table = [] {
    struct T { uint16_t v[32]; } t{};
    for (int l = 0; l < 16; ++l) t.v[2 * l + 1] = static_cast<uint16_t>(l / kLanes);
    return t;
  }();
  return _mm512_load_si512(table.v);
}

// The lanes' weight scales of span sp for the narrow kernel below.
template <int kLanes>
CCTUNE_QTARGET_AVX512VNNI CCTUNE_QINLINE __m512 VnniNarrowScales(const bf16* scales, int64_t sp,
                                                                 int64_t groups, int64_t blocks,
                                                                 int64_t bpg, __m512i widx,
                                                                 __m512i quarter) {
  if constexpr (kLanes > 0) {  // bpg a power of two: a shift, not a division
    const int64_t per = 16 / kLanes, g0 = (4 * sp) >> __builtin_ctzll(bpg);
    const int64_t n = std::min(per, groups - g0);
    const __m128i v = _mm_maskz_loadu_epi16(static_cast<__mmask8>((1u << n) - 1), scales + g0);
    return _mm512_castsi512_ps(
        _mm512_maskz_permutexvar_epi16(__mmask32{0xAAAAAAAAu}, widx, _mm512_castsi128_si512(v)));
  } else {
    float s[4];
    for (int q = 0; q < 4; ++q) s[q] = Bf16ToFloat(scales[std::min(4 * sp + q, blocks - 1) / bpg]);
    return _mm512_permutexvar_ps(quarter, _mm512_castps128_ps512(_mm_loadu_ps(s)));
  }
}

// Each lane takes its block's group scale. kLanes: lanes per group scale, 4 (groupsize 32: the
// span's 4 scales in one masked 8-byte load and a vpermw), 8 (64), 16 (128 and 256: one
// scale); 0: any other multiple of 32 (4 scalar scales; the slow path of rare groupsizes such
// as 96 and 192). Measured hot in L2 (quant_gemv_bench hot, 1 thread): about 0.025 ns per
// weight for groupsizes 32, 128 and 256, including the activations' quantization.
template <int MR, int kLanes>
CCTUNE_QTARGET_AVX512VNNI void VnniInt4ActTileNarrow(const QuantMatrix& w, const Int4ActRows& x,
                                                     const uint8_t* row, const bf16* scales,
                                                     const bf16* zeros, int64_t groups, float* c,
                                                     int64_t ldc) {
  const int64_t blocks = (w.k + kInt4BlockSize - 1) / kInt4BlockSize;
  const int64_t spans = (blocks + 3) / 4, bpg = w.groupsize / kInt4BlockSize;
  const __m512i widx = ScaleWordIndex<kLanes == 0 ? 16 : kLanes>();
  const __m512i quarter = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  __m512 acc[2][MR];
  for (int i = 0; i < MR; ++i) acc[0][i] = acc[1][i] = _mm512_setzero_ps();
  // Unrolled by two with a fixed accumulator each (an indexed one would live in memory).
  int64_t sp = 0;
  for (; sp + 2 <= spans; sp += 2) {
    VnniInt4SpanRows<MR>(x, row, sp, blocks,
                         VnniNarrowScales<kLanes>(scales, sp, groups, blocks, bpg, widx, quarter),
                         acc[0]);
    VnniInt4SpanRows<MR>(x, row, sp + 1, blocks,
                         VnniNarrowScales<kLanes>(scales, sp + 1, groups, blocks, bpg, widx,
                                                  quarter),
                         acc[1]);
  }
  if (sp < spans) {
    VnniInt4SpanRows<MR>(x, row, sp, blocks,
                         VnniNarrowScales<kLanes>(scales, sp, groups, blocks, bpg, widx, quarter),
                         acc[0]);
  }
  for (int i = 0; i < MR; ++i) acc[0][i] = _mm512_add_ps(acc[0][i], acc[1][i]);
  VnniInt4ZeroTerm<MR>(x, scales, zeros, groups, acc[0]);
  for (int i = 0; i < MR; ++i) c[i * ldc] = _mm512_reduce_add_ps(acc[0][i]);
}

template <int MR>
CCTUNE_QTARGET_AVX512VNNI void VnniInt4ActTile(const QuantMatrix& w, const Int4ActRows& x,
                                               const uint8_t* row, const bf16* scales,
                                               const bf16* zeros, int64_t groups, float* c,
                                               int64_t ldc) {
  switch (w.groupsize) {
    case 32:
      return VnniInt4ActTileNarrow<MR, 4>(w, x, row, scales, zeros, groups, c, ldc);
    case 64:
      return VnniInt4ActTileNarrow<MR, 8>(w, x, row, scales, zeros, groups, c, ldc);
    case 128:
    case 256:
      return VnniInt4ActTileNarrow<MR, 16>(w, x, row, scales, zeros, groups, c, ldc);
    default:
      return VnniInt4ActTileNarrow<MR, 0>(w, x, row, scales, zeros, groups, c, ldc);
  }
}

template <quant_internal::Int8ActIsa kIsa, int MR>
void Int4ActTileFor(const QuantMatrix& w, const Int4ActRows& x, const uint8_t* row,
                    const bf16* scales, const bf16* zeros, int64_t groups, float* c, int64_t ldc) {
  if constexpr (kIsa == quant_internal::Int8ActIsa::kAvx512Vnni) {
    VnniInt4ActTile<MR>(w, x, row, scales, zeros, groups, c, ldc);
  } else if constexpr (kIsa == quant_internal::Int8ActIsa::kAvx2) {
    Avx2Int4ActTile<MR>(w, x, row, scales, zeros, groups, c, ldc);
  } else {
    ScalarInt4ActTile<MR>(w, x, row, scales, zeros, groups, c, ldc);
  }
}

// Rows [j0, j1) of W against the m quantized rows of A, 4 rows of A per pass over a W row.
template <quant_internal::Int8ActIsa kIsa>
void Int4ActRowsRange(int64_t m, const Int4ActRows& x, const QuantMatrix& w, int64_t j0,
                      int64_t j1, float* c, int64_t ldc) {
  const int64_t rb = Int4RowBytes(w.k), groups = Int4Groups(w.k, w.groupsize);
  for (int64_t j = j0; j < j1; ++j) {
    const uint8_t* row = w.data + j * rb;
    const bf16* s = w.scales4 + j * groups;
    const bf16* z = w.zeros4 + j * groups;
    int64_t i = 0;
    for (; i + 4 <= m; i += 4) {
      Int4ActTileFor<kIsa, 4>(w, x.Offset(i), row, s, z, groups, c + i * ldc + j, ldc);
    }
    for (; i + 2 <= m; i += 2) {
      Int4ActTileFor<kIsa, 2>(w, x.Offset(i), row, s, z, groups, c + i * ldc + j, ldc);
    }
    for (; i < m; ++i) Int4ActTileFor<kIsa, 1>(w, x.Offset(i), row, s, z, groups, c + i * ldc + j, ldc);
  }
}

// ---------------------------------------------------------------------------------------------
// Row-range drivers: rows of A in tiles of 4, then 2, then 1 (more accumulators per row when
// fewer rows share a W row, for FMA latency).

// `Tile<MR, U>` instantiated for the three tile shapes an ISA path uses.
#define CCTUNE_INT8_RANGE(NAME, TILE)                                                            \
  void NAME(int64_t m, const float* a, int64_t lda, const QuantMatrix& w, int64_t j0,            \
            int64_t j1, float* c, int64_t ldc) {                                                 \
    const int64_t rb = Int8RowBytes(w.k);                                                        \
    for (int64_t j = j0; j < j1; ++j) {                                                          \
      const int8_t* b = reinterpret_cast<const int8_t*>(w.data + j * rb);                        \
      int64_t i = 0;                                                                             \
      for (; i + 4 <= m; i += 4) TILE<4, 1>(w.k, a + i * lda, lda, b, w.scales[j], c + i * ldc + j, ldc); \
      for (; i + 2 <= m; i += 2) TILE<2, 2>(w.k, a + i * lda, lda, b, w.scales[j], c + i * ldc + j, ldc); \
      for (; i < m; ++i) TILE<1, 4>(w.k, a + i * lda, lda, b, w.scales[j], c + i * ldc + j, ldc);  \
    }                                                                                            \
  }
CCTUNE_INT8_RANGE(Avx2Int8Rows, Avx2Int8Tile)
CCTUNE_INT8_RANGE(Avx512Int8Rows, Avx512Int8Tile)
#undef CCTUNE_INT8_RANGE

#define CCTUNE_INT4_RANGE(NAME, TILE)                                                            \
  void NAME(int64_t m, const float* a, int64_t lda, const QuantMatrix& w, const float* xs,       \
            int64_t j0, int64_t j1, float* c, int64_t ldc) {                                     \
    const int64_t rb = Int4RowBytes(w.k), groups = Int4Groups(w.k, w.groupsize);                 \
    for (int64_t j = j0; j < j1; ++j) {                                                          \
      const uint8_t* row = w.data + j * rb;                                                      \
      const bf16* s = w.scales4 + j * groups;                                                    \
      const bf16* z = w.zeros4 + j * groups;                                                     \
      int64_t i = 0;                                                                             \
      for (; i + 4 <= m; i += 4) {                                                               \
        TILE<4>(w, a + i * lda, lda, row, s, z, xs + i * groups, groups, c + i * ldc + j, ldc);  \
      }                                                                                          \
      for (; i < m; ++i) {                                                                       \
        TILE<1>(w, a + i * lda, lda, row, s, z, xs + i * groups, groups, c + i * ldc + j, ldc);  \
      }                                                                                          \
    }                                                                                            \
  }
CCTUNE_INT4_RANGE(Avx2Int4Rows, Avx2Int4Tile)
CCTUNE_INT4_RANGE(Avx512Int4Rows, Avx512Int4Tile)
#undef CCTUNE_INT4_RANGE

bool IsaOk(QuantIsa isa) {
  switch (isa) {
    case QuantIsa::kAvx2:
      return IsaSupported(IsaLevel::kAvx2);
    case QuantIsa::kAvx512:
      return IsaSupported(IsaLevel::kAvx512);
    default:
      return true;
  }
}

void RunRows(QuantIsa isa, int64_t m, const float* a, int64_t lda, const QuantMatrix& w,
             const float* xs, int64_t j0, int64_t j1, float* c, int64_t ldc) {
  const bool int8 = w.format == QuantFormat::kInt8PerChannel;
  switch (isa) {
    case QuantIsa::kAvx512:
      return int8 ? Avx512Int8Rows(m, a, lda, w, j0, j1, c, ldc)
                  : Avx512Int4Rows(m, a, lda, w, xs, j0, j1, c, ldc);
    case QuantIsa::kAvx2:
      return int8 ? Avx2Int8Rows(m, a, lda, w, j0, j1, c, ldc)
                  : Avx2Int4Rows(m, a, lda, w, xs, j0, j1, c, ldc);
    default:
      return int8 ? ScalarInt8Rows(m, a, lda, w, j0, j1, c, ldc)
                  : ScalarInt4Rows(m, a, lda, w, xs, j0, j1, c, ldc);
  }
}

bool CpuHasVnni() {
  static const bool has = __builtin_cpu_supports("avx512vnni");
  return has;
}

// fn(j0, j1) over [0, w.n) in runs of whole kRowBlock blocks, one run per participant of the
// persistent pool, not an OpenMP region: decode runs 7 of these per layer and token, and
// OpenMP's end-of-region barrier spins (kernels/cpu/thread_pool.h; the bf16 GEMV measured 12%
// of decode there). Small products run on the caller.
template <typename Fn>
void ForRowRanges(int64_t m, const QuantMatrix& w, Fn fn) {
  const int64_t blocks = (w.n + kRowBlock - 1) / kRowBlock;
  auto range = [&](int task, int num_tasks) {
    const int64_t b0 = blocks * task / num_tasks, b1 = blocks * (task + 1) / num_tasks;
    if (b0 < b1) fn(b0 * kRowBlock, std::min(w.n, b1 * kRowBlock));
  };
  ThreadPool& pool = ThreadPool::Default();
  const bool parallel = m * w.n * w.k >= kMinParallelMacs && blocks > 1 && !omp_in_parallel();
  if (parallel && pool.num_threads() > 1) {
    pool.Run(pool.num_threads(), range);
  } else {
    range(0, 1);
  }
}

// Rows of A per pass of the int8-activation kernels over W: their int8 copy (ldq bytes a row)
// within 256 KiB, a multiple of 4 (the tile), all of them for decode.
int64_t ActRowBlock(int64_t m, int64_t ldq) {
  const int64_t fit = std::max<int64_t>(4, (256 << 10) / std::max<int64_t>(ldq, 1) / 4 * 4);
  return std::min(m, fit);
}

QuantActivations DefaultQuantActivations() {
  const char* env = std::getenv("CCTUNE_QUANT_ACTIVATIONS");
  if (env == nullptr || std::string(env) == "int8") return QuantActivations::kInt8;
  CCTUNE_CHECK(std::string(env) == "f32", "CCTUNE_QUANT_ACTIVATIONS must be int8 or f32, got '",
               env, "'");
  return QuantActivations::kF32;
}

std::atomic<QuantActivations>& ActivationMode() {
  static std::atomic<QuantActivations> mode{DefaultQuantActivations()};
  return mode;
}

// One full block of QuantizeActivations: the scalar loop's values (x · (1 / d) in f32, rounded
// to nearest even by vcvtps2dq under the default MXCSR as nearbyint does, clamped), its d back.
CCTUNE_QTARGET_AVX512 float Avx512QuantizeActBlock(const float* x, bool biased, int8_t* q) {
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  __m512 v[4];
  __m512 mx = _mm512_setzero_ps();
  for (int u = 0; u < 4; ++u) {
    v[u] = _mm512_loadu_ps(x + 16 * u);
    mx = _mm512_max_ps(mx, _mm512_and_ps(v[u], abs_mask));
  }
  const float amax = _mm512_reduce_max_ps(mx);
  const float scale = amax > 0.f ? amax / 127.f : 1.f;
  const __m512 inv = _mm512_set1_ps(1.f / scale);
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  const __m512i bias = _mm512_set1_epi32(biased ? 128 : 0);
  for (int u = 0; u < 4; ++u) {
    __m512i r = _mm512_cvtps_epi32(_mm512_mul_ps(v[u], inv));
    r = _mm512_add_epi32(_mm512_max_epi32(_mm512_min_epi32(r, hi), lo), bias);
    // The low byte: v as int8, or v + 128 as uint8 bits.
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16 * u), _mm512_cvtepi32_epi8(r));
  }
  return scale;
}

// The same for AVX2 (x86-64-v3 has no vpmovdb: the int32 lanes are packed down by vpackssdw /
// vpacksswb, exact for values already clamped to [-127, 127] (+128 wraps as the scalar's
// v + 128 - 256 does), then put back in order by one vpermd).
CCTUNE_QTARGET_AVX2 float Avx2QuantizeActBlock(const float* x, bool biased, int8_t* q) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 v[8];
  __m256 mx = _mm256_setzero_ps();
  for (int u = 0; u < 8; ++u) {
    v[u] = _mm256_loadu_ps(x + 8 * u);
    mx = _mm256_max_ps(mx, _mm256_and_ps(v[u], abs_mask));
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  const float amax = _mm_cvtss_f32(m4);
  const float scale = amax > 0.f ? amax / 127.f : 1.f;
  const __m256 inv = _mm256_set1_ps(1.f / scale);
  const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
  __m256i r[8];
  for (int u = 0; u < 8; ++u) {
    r[u] = _mm256_max_epi32(_mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(v[u], inv)), hi),
                            lo);
  }
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(biased ? 0x80 : 0));
  for (int h = 0; h < 2; ++h) {
    // packs work per 128-bit lane: bytes come out as dwords 0,2,4,6 | 1,3,5,7 of the 4 vectors.
    const __m256i w01 = _mm256_packs_epi32(r[4 * h], r[4 * h + 1]);
    const __m256i w23 = _mm256_packs_epi32(r[4 * h + 2], r[4 * h + 3]);
    __m256i b8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(w01, w23), order);
    b8 = _mm256_xor_si256(b8, bias);  // + 128 as uint8 bits
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * h), b8);
  }
  return scale;
}

}  // namespace

void SetQuantActivations(QuantActivations mode) { ActivationMode().store(mode); }
QuantActivations GetQuantActivations() { return ActivationMode().load(); }

void QuantizeActivations(int64_t m, int64_t k, const float* a, int64_t lda, bool biased,
                         int8_t* q, int64_t ldq, float* d, int64_t ldd) {
  const int64_t blocks = (k + kActBlock - 1) / kActBlock;
  const int8_t pad = biased ? static_cast<int8_t>(-128) : 0;  // 0 + 128 as uint8 bits
  const bool avx512 = IsaSupported(IsaLevel::kAvx512);
  const bool avx2 = IsaSupported(IsaLevel::kAvx2);
  for (int64_t i = 0; i < m; ++i) {
    const float* ai = a + i * lda;
    int8_t* qi = q + i * ldq;
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t q0 = blk * kActBlock, q1 = std::min(k, q0 + kActBlock);
      if (avx512 && q1 - q0 == kActBlock) {
        d[i * ldd + blk] = Avx512QuantizeActBlock(ai + q0, biased, qi + q0);
        continue;
      }
      if (avx2 && q1 - q0 == kActBlock) {
        d[i * ldd + blk] = Avx2QuantizeActBlock(ai + q0, biased, qi + q0);
        continue;
      }
      float amax = 0.f;
      for (int64_t t = q0; t < q1; ++t) amax = std::max(amax, std::fabs(ai[t]));
      const float scale = amax > 0.f ? amax / 127.f : 1.f;
      const float inv = 1.f / scale;
      for (int64_t t = q0; t < q1; ++t) {
        const int v = static_cast<int>(std::clamp(std::nearbyint(ai[t] * inv), -127.f, 127.f));
        qi[t] = static_cast<int8_t>(biased ? v + 128 - 256 * (v >= 0) : v);
      }
      d[i * ldd + blk] = scale;
    }
    for (int64_t t = k; t < ldq; ++t) qi[t] = pad;
  }
}

// ---------------------------------------------------------------------------------------------
// Quantize / dequantize.

void QuantizeInt8(int64_t n, int64_t k, const void* w, DType w_dtype, int64_t ldw, uint8_t* q,
                  float* scales) {
  const int64_t rb = Int8RowBytes(k);
#pragma omp parallel for schedule(static) if (n * k >= kMinParallelMacs)
  for (int64_t j = 0; j < n; ++j) {
    float amax = 0.f;
    for (int64_t i = 0; i < k; ++i) amax = std::max(amax, std::fabs(LoadAsFloat(w, w_dtype, j * ldw + i)));
    const float scale = amax > 0.f ? amax / 127.f : 1.f;
    int8_t* qj = reinterpret_cast<int8_t*>(q + j * rb);
    for (int64_t i = 0; i < k; ++i) {
      const float v = std::nearbyint(LoadAsFloat(w, w_dtype, j * ldw + i) / scale);
      qj[i] = static_cast<int8_t>(std::clamp(v, -127.f, 127.f));
    }
    for (int64_t i = k; i < rb; ++i) qj[i] = 0;
    scales[j] = scale;
  }
}

void QuantizeInt4(int64_t n, int64_t k, int64_t groupsize, const void* w, DType w_dtype,
                  int64_t ldw, uint8_t* q, bf16* scales, bf16* zeros) {
  CCTUNE_CHECK(groupsize >= kInt4BlockSize && groupsize % kInt4BlockSize == 0,
               "QuantizeInt4: groupsize (", groupsize, ") must be a multiple of 32");
  const int64_t rb = Int4RowBytes(k), groups = Int4Groups(k, groupsize);
#pragma omp parallel for schedule(static) if (n * k >= kMinParallelMacs)
  for (int64_t j = 0; j < n; ++j) {
    uint8_t* row = q + j * rb;
    std::fill(row, row + rb, uint8_t{0});
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t i0 = g * groupsize, i1 = std::min(k, i0 + groupsize);
      float lo = LoadAsFloat(w, w_dtype, j * ldw + i0), hi = lo;
      for (int64_t i = i0; i < i1; ++i) {
        const float v = LoadAsFloat(w, w_dtype, j * ldw + i);
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
      const bf16 sb = FloatToBf16(std::max(hi - lo, 1e-6f) / 15.f);
      const float s = Bf16ToFloat(sb);
      const bf16 zb = FloatToBf16(lo + 8.f * s);
      const float z = Bf16ToFloat(zb);
      scales[j * groups + g] = sb;
      zeros[j * groups + g] = zb;
      const float min_val = z - 8.f * s;
      for (int64_t i = i0; i < i1; ++i) {
        const float v = std::nearbyint((LoadAsFloat(w, w_dtype, j * ldw + i) - min_val) / s);
        const uint8_t nib = static_cast<uint8_t>(std::clamp(v, 0.f, 15.f));
        const int64_t t = i % kInt4BlockSize;
        uint8_t& byte = row[(i / kInt4BlockSize) * 16 + (t & 15)];
        byte |= t < 16 ? nib : static_cast<uint8_t>(nib << 4);
      }
    }
  }
}

void Dequantize(const QuantMatrix& w, int64_t row0, int64_t rows, float* out, int64_t ldo) {
  if (w.format == QuantFormat::kInt8PerChannel) {
    const int64_t rb = Int8RowBytes(w.k);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t j = row0 + r;
      const int8_t* b = reinterpret_cast<const int8_t*>(w.data + j * rb);
      const float s = w.scales[j];
      for (int64_t i = 0; i < w.k; ++i) out[r * ldo + i] = static_cast<float>(b[i]) * s;
    }
    return;
  }
  const int64_t rb = Int4RowBytes(w.k), groups = Int4Groups(w.k, w.groupsize);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t j = row0 + r;
    const uint8_t* row = w.data + j * rb;
    for (int64_t g = 0; g < groups; ++g) {
      const float s = Bf16ToFloat(w.scales4[j * groups + g]);
      const float z = Bf16ToFloat(w.zeros4[j * groups + g]);
      const int64_t i1 = std::min(w.k, (g + 1) * w.groupsize);
      for (int64_t i = g * w.groupsize; i < i1; ++i) {
        const int nib = Nibble(row + (i / kInt4BlockSize) * 16, i % kInt4BlockSize);
        out[r * ldo + i] = static_cast<float>(nib - 8) * s + z;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// GEMM.

namespace quant_internal {

const char* QuantIsaName(QuantIsa isa) {
  switch (isa) {
    case QuantIsa::kAvx2:
      return "avx2";
    case QuantIsa::kAvx512:
      return "avx512";
    default:
      return "scalar";
  }
}

QuantIsa BestQuantIsa() {
  if (IsaSupported(IsaLevel::kAvx512)) return QuantIsa::kAvx512;
  if (IsaSupported(IsaLevel::kAvx2)) return QuantIsa::kAvx2;
  return QuantIsa::kScalar;
}

void StreamQuantGemmNT(QuantIsa isa, int64_t m, const float* a, int64_t lda, const QuantMatrix& w,
                       float* c, int64_t ldc) {
  CCTUNE_CHECK(IsaOk(isa), "QuantGemmNT: path ", QuantIsaName(isa), " is not supported here");
  if (m <= 0 || w.n <= 0) return;
  // Grown, never shrunk: no allocation per call once warm.
  thread_local std::vector<float> xs;
  if (w.format == QuantFormat::kInt4Grouped) {
    xs.resize(std::max<size_t>(xs.size(), m * Int4Groups(w.k, w.groupsize)));
    GroupSums(m, a, lda, w, xs.data());
  }
  const float* xsp = xs.data();
  ForRowRanges(m, w, [&](int64_t j0, int64_t j1) { RunRows(isa, m, a, lda, w, xsp, j0, j1, c, ldc); });
}

const char* Int8ActIsaName(Int8ActIsa isa) {
  switch (isa) {
    case Int8ActIsa::kAvx2:
      return "avx2";
    case Int8ActIsa::kAvx512Vnni:
      return "avx512vnni";
    default:
      return "scalar";
  }
}

Int8ActIsa BestInt8ActIsa() {
  if (IsaSupported(IsaLevel::kAvx512) && CpuHasVnni()) return Int8ActIsa::kAvx512Vnni;
  if (IsaSupported(IsaLevel::kAvx2)) return Int8ActIsa::kAvx2;
  return Int8ActIsa::kScalar;
}

void StreamInt8ActGemmNT(Int8ActIsa isa, int64_t m, const float* a, int64_t lda,
                         const QuantMatrix& w, float* c, int64_t ldc) {
  CCTUNE_CHECK(w.format == QuantFormat::kInt8PerChannel,
               "StreamInt8ActGemmNT: int8 weights only");
  CCTUNE_CHECK(isa == Int8ActIsa::kScalar ||
                   (isa == Int8ActIsa::kAvx2 && IsaSupported(IsaLevel::kAvx2)) ||
                   (isa == Int8ActIsa::kAvx512Vnni && IsaSupported(IsaLevel::kAvx512) &&
                    CpuHasVnni()),
               "QuantGemmNT: path ", Int8ActIsaName(isa), " is not supported here");
  if (m <= 0 || w.n <= 0) return;
  // Grown, never shrunk: no allocation per call once warm.
  thread_local std::vector<int8_t> xq;
  thread_local std::vector<float> xd;
  const int64_t blocks = (w.k + kActBlock - 1) / kActBlock, ldq = blocks * kActBlock;
  xq.resize(std::max<size_t>(xq.size(), m * ldq));
  xd.resize(std::max<size_t>(xd.size(), std::max<int64_t>(m * blocks, 1)));
  QuantizeActivations(m, w.k, a, lda, isa == Int8ActIsa::kAvx512Vnni, xq.data(), ldq, xd.data(),
                      blocks);
  const ActRows x{xq.data(), ldq, xd.data(), blocks, blocks};
  // Rows of A in blocks whose quantized copy stays in L2 while W streams past (prefill).
  const int64_t mb = ActRowBlock(m, ldq);
  for (int64_t i0 = 0; i0 < m; i0 += mb) {
    const int64_t rows = std::min(mb, m - i0);
    const ActRows xb = x.Offset(i0);
    float* cb = c + i0 * ldc;
    ForRowRanges(rows, w, [&](int64_t j0, int64_t j1) {
      switch (isa) {
        case Int8ActIsa::kAvx512Vnni:
          return Int8ActRows<VnniAct>(rows, xb, w, j0, j1, cb, ldc);
        case Int8ActIsa::kAvx2:
          return Int8ActRows<Avx2Act>(rows, xb, w, j0, j1, cb, ldc);
        default:
          return Int8ActRows<ScalarAct>(rows, xb, w, j0, j1, cb, ldc);
      }
    });
  }
}

void StreamInt4ActGemmNT(Int8ActIsa isa, int64_t m, const float* a, int64_t lda,
                         const QuantMatrix& w, float* c, int64_t ldc) {
  CCTUNE_CHECK(w.format == QuantFormat::kInt4Grouped, "StreamInt4ActGemmNT: int4 weights only");
  CCTUNE_CHECK(isa == Int8ActIsa::kScalar ||
                   (isa == Int8ActIsa::kAvx2 && IsaSupported(IsaLevel::kAvx2)) ||
                   (isa == Int8ActIsa::kAvx512Vnni && IsaSupported(IsaLevel::kAvx512) &&
                    CpuHasVnni()),
               "QuantGemmNT: path ", Int8ActIsaName(isa), " is not supported here");
  if (m <= 0 || w.n <= 0) return;
  // Grown, never shrunk: no allocation per call once warm.
  thread_local std::vector<int8_t> xq, xp;
  thread_local std::vector<float> xd, xs, dv;
  const int64_t blocks = (w.k + kActBlock - 1) / kActBlock;
  const int64_t spans = (w.k + kVnniSpan - 1) / kVnniSpan, ldq = spans * kVnniSpan;
  const int64_t groups = Int4Groups(w.k, w.groupsize);
  xq.resize(std::max<size_t>(xq.size(), m * ldq));
  xd.resize(std::max<size_t>(xd.size(), std::max<int64_t>(m * blocks, 1)));
  xs.resize(std::max<size_t>(xs.size(), std::max<int64_t>(m * groups, 1)));
  QuantizeActivations(m, w.k, a, lda, /*biased=*/false, xq.data(), ldq, xd.data(), blocks);
  // xs: Σ d·q over each group, from the integer sums of its blocks of 32.
  for (int64_t i = 0; i < m; ++i) {
    const int8_t* qi = xq.data() + i * ldq;
    for (int64_t g = 0; g < groups; ++g) {
      int64_t b0, b1;
      GroupBlocks(w, g, &b0, &b1);
      float s = 0.f;
      for (int64_t blk = b0; blk < b1; ++blk) {
        int32_t sum = 0;
        for (int64_t t = 0; t < kInt4BlockSize; ++t) sum += qi[blk * kInt4BlockSize + t];
        s += xd[i * blocks + blk / 2] * static_cast<float>(sum);
      }
      xs[i * groups + g] = s;
    }
  }
  const int8_t* q = xq.data();
  if (isa == Int8ActIsa::kAvx2) {  // per activation block the AVX2 kernel's order
    xp.resize(std::max<size_t>(xp.size(), m * ldq));
    for (int64_t i = 0; i < m * ldq; i += kActBlock) {
      for (int64_t t = 0; t < kActBlock; t += 16) {
        std::memcpy(xp.data() + i + t, xq.data() + i + Avx2Int4ActOrder(t), 16);
      }
    }
    q = xp.data();
  }
  if (isa == Int8ActIsa::kAvx512Vnni) {  // the spans in the VNNI kernel's order, d per lane
    xp.resize(std::max<size_t>(xp.size(), m * ldq));
    dv.resize(std::max<size_t>(dv.size(), m * spans * 16));
    for (int64_t i = 0; i < m * ldq; i += kVnniSpan) {
      for (int64_t t = 0; t < kVnniSpan; t += 16) {  // runs of 16 consecutive inputs
        std::memcpy(xp.data() + i + t, xq.data() + i + VnniSpanSource(t), 16);
      }
    }
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t sp = 0; sp < spans; ++sp) {
        for (int64_t l = 0; l < 16; ++l) {
          const int64_t blk = 2 * sp + l / 8;  // past the last block: 0 (its inputs are 0)
          dv[(i * spans + sp) * 16 + l] = blk < blocks ? xd[i * blocks + blk] : 0.f;
        }
      }
    }
    q = xp.data();
  }
  const Int4ActRows x{q, ldq, xd.data(), blocks, xs.data(), groups, dv.data(), spans * 16};
  const int64_t mb = ActRowBlock(m, ldq);
  for (int64_t i0 = 0; i0 < m; i0 += mb) {
    const int64_t rows = std::min(mb, m - i0);
    const Int4ActRows xb = x.Offset(i0);
    float* cb = c + i0 * ldc;
    ForRowRanges(rows, w, [&](int64_t j0, int64_t j1) {
      switch (isa) {
        case Int8ActIsa::kAvx512Vnni:
          return Int4ActRowsRange<Int8ActIsa::kAvx512Vnni>(rows, xb, w, j0, j1, cb, ldc);
        case Int8ActIsa::kAvx2:
          return Int4ActRowsRange<Int8ActIsa::kAvx2>(rows, xb, w, j0, j1, cb, ldc);
        default:
          return Int4ActRowsRange<Int8ActIsa::kScalar>(rows, xb, w, j0, j1, cb, ldc);
      }
    });
  }
}

void PanelQuantGemmNT(int64_t m, const float* a, int64_t lda, const QuantMatrix& w, float* c,
                      int64_t ldc) {
  if (m <= 0 || w.n <= 0) return;
  const int64_t panel_rows =
      std::clamp<int64_t>(kPanelBytes / (4 * std::max<int64_t>(w.k, 1)), 8, 256) / 8 * 8;
  const int64_t panels = (w.n + panel_rows - 1) / panel_rows;
#pragma omp parallel for schedule(static) if (panels > 1 && !omp_in_parallel())
  for (int64_t p = 0; p < panels; ++p) {
    thread_local std::vector<float> panel;
    const int64_t j0 = p * panel_rows, rows = std::min(panel_rows, w.n - j0);
    panel.resize(std::max<size_t>(panel.size(), rows * std::max<int64_t>(w.k, 1)));
    Dequantize(w, j0, rows, panel.data(), w.k);
    // Inside this parallel region GemmNT runs on the calling thread.
    GemmNT(m, rows, w.k, a, lda, panel.data(), DType::kF32, w.k, c + j0, ldc, 0.f);
  }
}

}  // namespace quant_internal

void QuantGemmNT(int64_t m, const float* a, int64_t lda, const QuantMatrix& w, float* c,
                 int64_t ldc) {
  const bool int8_weights = w.format == QuantFormat::kInt8PerChannel;
  const bool int8_acts =
      GetQuantActivations() == QuantActivations::kInt8 &&
      m <= (int8_weights ? quant_internal::kMaxInt8ActRows : quant_internal::kMaxInt4ActRows);
  if (int8_acts && int8_weights) {
    quant_internal::StreamInt8ActGemmNT(quant_internal::BestInt8ActIsa(), m, a, lda, w, c, ldc);
  } else if (int8_acts) {
    quant_internal::StreamInt4ActGemmNT(quant_internal::BestInt8ActIsa(), m, a, lda, w, c, ldc);
  } else if (m <= quant_internal::kMaxStreamRows) {
    quant_internal::StreamQuantGemmNT(quant_internal::BestQuantIsa(), m, a, lda, w, c, ldc);
  } else {
    quant_internal::PanelQuantGemmNT(m, a, lda, w, c, ldc);
  }
}

}  // namespace cctune::cpu
