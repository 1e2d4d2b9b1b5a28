#include "kernels/cpu/gemm/packed_gemm.h"

// GCC 12's AVX-512 intrinsic headers trip a false -Wmaybe-uninitialized (GCC PR105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "core/status.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/simd_targets.h"

namespace cctune::cpu {
namespace {

// Below this many multiply-adds a call runs on one thread (fork/join would dominate).
constexpr int64_t kMinParallelMacs = 1 << 15;

struct Args {
  int64_t m, n, k;
  const float* a;
  int64_t lda;
  const void* b;
  DType b_dtype;
  int64_t ldb;
  float* c;
  int64_t ldc;
  float beta;
  // A stored [k, m] (element (i, q) at a[q * lda + i]; PackedSgemm), B stored
  // [k, n] (element (j, q) at b[q * ldb + j]; f32, or bf16 on the bf16 path: PackedGemmNN)
  // instead of the rows of the Linear shape.
  bool a_kmajor = false, b_kmajor = false;
};

float LoadB(const Args& p, int64_t j, int64_t q) {
  const int64_t at = j * p.ldb + q;
  switch (p.b_dtype) {
    case DType::kBF16:
      return Bf16ToFloat(static_cast<const bf16*>(p.b)[at]);
    case DType::kF16:
      return F16ToFloat(static_cast<const f16*>(p.b)[at]);
    default:
      return static_cast<const float*>(p.b)[at];
  }
}

// ---------------------------------------------------------------------------------------------
// Packing. A strip (MR rows from i0, mr of them real) of k-block [p0, p0 + klen) goes to
// dst[s][MR] (s: k-step), rows past mr zero. A B micro-panel (NR rows of B from j0, nr real)
// likewise to dst[s][NR]: column j of the C tile is B row j0 + j.

// f32 A: dst[s * MR + r] = a[i0 + r][p0 + s].
template <int MR>
void PackAF32(const Args& p, int64_t i0, int mr, int64_t p0, int64_t klen, float* dst) {
  const float* rows[MR];
  for (int r = 0; r < MR; ++r) rows[r] = r < mr ? p.a + (i0 + r) * p.lda + p0 : nullptr;
  for (int64_t s = 0; s < klen; ++s) {
    for (int r = 0; r < MR; ++r) dst[s * MR + r] = r < mr ? rows[r][s] : 0.f;
  }
}

// k-major operands (PackedSgemm's transposed cases): each k-step's MR (NR) values are
// contiguous in memory, so a strip (micro-panel) is one short copy per k-step. `rows` is the
// operand's first element, `ld` its k-stride.
template <int W>
void PackKMajorF32(const float* first, int64_t ld, int w, int64_t p0, int64_t klen, float* dst) {
  for (int64_t s = 0; s < klen; ++s) {
    const float* src = first + (p0 + s) * ld;
    float* d = dst + s * W;
    std::memcpy(d, src, sizeof(float) * static_cast<size_t>(w));
    for (int r = w; r < W; ++r) d[r] = 0.f;
  }
}

// B to f32, any dtype, one element at a time: steps [s0, klen) of columns [c0, c0 + width) of
// an NR-wide panel (the scalar path, and the SIMD packers' odd tails).
template <int NR>
void PackBF32Scalar(const Args& p, int64_t j0, int nr, int64_t p0, int64_t s0, int64_t klen,
                    int c0, int width, float* dst) {
  for (int64_t s = s0; s < klen; ++s) {
    for (int r = c0; r < c0 + width; ++r) {
      dst[s * NR + r] = r < nr ? LoadB(p, j0 + r, p0 + s) : 0.f;
    }
  }
}

// B is packed by in-register transposes of 16 x 16 (AVX-512) or 8 x 8 (AVX2) 32-bit words,
// each row of B read front to back (gathers down the columns were 4x slower here: rows 4 KiB
// apart all fall into one L1 set). For 16-bit B a word is a k-pair, so the transpose yields,
// per pair, the 16 rows' (B[r][2s], B[r][2s + 1]).

// r[j] <- column j of the 16 x 16 matrix of words whose row i is r[i].
CCTUNE_TARGET_AVX512 CCTUNE_INLINE void Transpose16x16(__m512i r[16]) {
  __m512i t[16], u[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // u[4g + c], 128-bit lane L: rows 4g..4g+3 of column 4L + c.
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
    u[4 * g] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
    u[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m512i x0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44);
    const __m512i x1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xee);
    const __m512i y0 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44);
    const __m512i y1 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xee);
    r[c] = _mm512_shuffle_i32x4(x0, y0, 0x88);
    r[4 + c] = _mm512_shuffle_i32x4(x0, y0, 0xdd);
    r[8 + c] = _mm512_shuffle_i32x4(x1, y1, 0x88);
    r[12 + c] = _mm512_shuffle_i32x4(x1, y1, 0xdd);
  }
}

// Loads 16 rows (rows past `rows` zero) of B from element q0 of [p0, p0 + klen): 16 words
// each (16 f32, or 32 16-bit values as pairs; masked past klen), then transposes them.
CCTUNE_TARGET_AVX512 CCTUNE_INLINE int64_t LoadTransposed16(const Args& p, int64_t row0, int rows,
                                                    int64_t p0, int64_t q0, int64_t klen,
                                                    __m512i w[16]) {
  const int64_t elem = static_cast<int64_t>(DTypeSize(p.b_dtype));
  const int64_t per = elem == 4 ? 16 : 32, valid = std::min(per, klen - q0);
  const char* base = static_cast<const char*>(p.b) + (row0 * p.ldb + p0 + q0) * elem;
#pragma GCC unroll 16
  for (int r = 0; r < 16; ++r) {
    const char* src = base + r * p.ldb * elem;
    // Rows of B sit in different pages, which the hardware prefetcher does not run ahead in:
    // ask for the line 4 blocks on (harmless past the row's end; prefetches do not fault).
    _mm_prefetch(src + 256, _MM_HINT_T0);
    if (r >= rows) {
      w[r] = _mm512_setzero_si512();
    } else if (elem == 4) {
      w[r] = _mm512_maskz_loadu_epi32(static_cast<__mmask16>((1u << valid) - 1u), src);
    } else {
      w[r] = _mm512_maskz_loadu_epi16(
          valid == 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << valid) - 1u), src);
    }
  }
  Transpose16x16(w);
  return valid;
}

// NR = 32 f32 panel (AVX-512 F kernel): bf16 -> f32 by shift / mask, f16 by vcvtph2ps.
CCTUNE_TARGET_AVX512 void PackBAvx512F32(const Args& p, int64_t j0, int nr, int64_t p0, int64_t klen,
                                     float* dst) {
  constexpr int NR = 32;
  const __m512i hi_mask = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  for (int h = 0; h < 2; ++h) {
    const int rows = std::clamp(nr - 16 * h, 0, 16);
    float* d = dst + 16 * h;
    const int64_t per = p.b_dtype == DType::kF32 ? 16 : 32;
    for (int64_t q0 = 0; q0 < klen; q0 += per) {
      __m512i w[16];
      const int64_t valid = LoadTransposed16(p, j0 + 16 * h, rows, p0, q0, klen, w);
      float* dq = d + q0 * NR;
      if (p.b_dtype == DType::kF32) {
        for (int64_t t = 0; t < valid; ++t) _mm512_storeu_ps(dq + t * NR, _mm512_castsi512_ps(w[t]));
        continue;
      }
      for (int64_t t = 0; 2 * t < valid; ++t) {
        __m512 lo, hi;
        if (p.b_dtype == DType::kBF16) {
          lo = _mm512_castsi512_ps(_mm512_slli_epi32(w[t], 16));
          hi = _mm512_castsi512_ps(_mm512_and_si512(w[t], hi_mask));
        } else {
          lo = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(w[t]));
          hi = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(w[t], 16)));
        }
        _mm512_storeu_ps(dq + 2 * t * NR, lo);
        if (2 * t + 1 < valid) _mm512_storeu_ps(dq + (2 * t + 1) * NR, hi);
      }
    }
  }
}

// f32 A strip for the 12-row AVX-512 kernel: 16 k-values of the 12 rows (4 zero rows) per
// 16 x 16 transpose, each column's first 12 words stored (scalar PackAF32 spent a sixth of the
// time of the kernels it fed at m = 128).
CCTUNE_TARGET_AVX512 void PackAAvx512F32(const Args& p, int64_t i0, int mr, int64_t p0, int64_t klen,
                                     float* dst) {
  constexpr int MR = 12;
  const __mmask16 store12 = 0x0fff;
  for (int64_t q0 = 0; q0 < klen; q0 += 16) {
    const int64_t valid = std::min<int64_t>(16, klen - q0);
    const __mmask16 mk = static_cast<__mmask16>((1u << valid) - 1u);
    __m512i w[16];
#pragma GCC unroll 16
    for (int r = 0; r < 16; ++r) {
      w[r] = r < mr ? _mm512_maskz_loadu_epi32(mk, p.a + (i0 + r) * p.lda + p0 + q0)
                    : _mm512_setzero_si512();
    }
    Transpose16x16(w);
    for (int64_t t = 0; t < valid; ++t) _mm512_mask_storeu_epi32(dst + (q0 + t) * MR, store12, w[t]);
  }
}

// NR = 32 bf16-pair panel (vdpbf16ps kernel): the transposed words are stored as they are (an
// odd klen's last pair has a zero high half from the masked load).
CCTUNE_TARGET_AVX512 void PackBAvx512Bf16Pairs(const Args& p, int64_t j0, int nr, int64_t p0,
                                           int64_t klen, uint32_t* dst) {
  constexpr int NR = 32;
  for (int h = 0; h < 2; ++h) {
    const int rows = std::clamp(nr - 16 * h, 0, 16);
    for (int64_t q0 = 0; q0 < klen; q0 += 32) {
      __m512i w[16];
      const int64_t valid = LoadTransposed16(p, j0 + 16 * h, rows, p0, q0, klen, w);
      uint32_t* dq = dst + 16 * h + q0 / 2 * NR;
      for (int64_t t = 0; 2 * t < valid; ++t) _mm512_storeu_si512(dq + t * NR, w[t]);
    }
  }
}

// k-major bf16 B (PackedGemmNN, B stored [k, n]): a pair of B's rows (k-steps 2s, 2s + 1) gives
// a micro-panel step directly, each 32-bit word B[2s][j] | B[2s + 1][j] << 16, columns past nr
// and an odd klen's missing high half zero.
CCTUNE_TARGET_AVX512 void PackKMajorBf16Pairs(const Args& p, int64_t j0, int nr, int64_t p0,
                                          int64_t klen, uint32_t* dst) {
  constexpr int NR = 32;
  const uint16_t* b = static_cast<const uint16_t*>(p.b);
  const int64_t steps = (klen + 1) / 2;
  for (int64_t s = 0; s < steps; ++s) {
    const uint16_t* r0 = b + (p0 + 2 * s) * p.ldb + j0;
    const uint16_t* r1 = 2 * s + 1 < klen ? r0 + p.ldb : nullptr;
    for (int h = 0; h < 2; ++h) {
      const int cols = std::clamp(nr - 16 * h, 0, 16);
      const __mmask16 mk = static_cast<__mmask16>((1u << cols) - 1u);
      const __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mk, r0 + 16 * h));
      const __m512i hi = r1 != nullptr
                             ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mk, r1 + 16 * h))
                             : _mm512_setzero_si512();
      _mm512_storeu_si512(dst + s * NR + 16 * h, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    }
  }
}

// A strip for the 12-row bf16 kernel: A rounded to bf16 (nearest even, vcvtne2ps2bf16), as
// pairs along k: dst[s * MR + r] = bf16(a[r][2s]) | bf16(a[r][2s + 1]) << 16, an odd klen's
// last pair with a zero high half. 32 k-values of each row make one word vector; 16 of them
// (4 zero rows) go through one 16 x 16 transpose. (The scalar packer this replaces took a
// third of the time of the kernels it fed on the 15.7M model's training shapes.)
CCTUNE_TARGET_AVX512BF16 void PackAAvx512Bf16Pairs(const Args& p, int64_t i0, int mr, int64_t p0,
                                                   int64_t klen, uint32_t* dst) {
  constexpr int MR = 12;  // kMr512
  const __mmask16 store12 = 0x0fff;
  for (int64_t q0 = 0; q0 < klen; q0 += 32) {
    const int64_t valid = std::min<int64_t>(32, klen - q0);
    const __mmask16 mlo = static_cast<__mmask16>(valid >= 16 ? 0xffffu : (1u << valid) - 1u);
    const __mmask16 mhi =
        static_cast<__mmask16>(valid >= 32 ? 0xffffu : (1u << std::max<int64_t>(0, valid - 16)) - 1u);
    __m512i w[16];
#pragma GCC unroll 16
    for (int r = 0; r < 16; ++r) {
      if (r < mr) {
        const float* src = p.a + (i0 + r) * p.lda + p0 + q0;
        w[r] = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(mhi, src + 16),
                                                             _mm512_maskz_loadu_ps(mlo, src)));
      } else {
        w[r] = _mm512_setzero_si512();
      }
    }
    Transpose16x16(w);
    for (int64_t t = 0; 2 * t < valid; ++t) {
      _mm512_mask_storeu_epi32(dst + (q0 / 2 + t) * MR, store12, w[t]);
    }
  }
}

// k-major f32 operand to bf16 pairs (the bf16 dot path of PackedSgemm: dYᵀ's strips, X's
// micro-panels): per k-step pair, W words bf16(row 2s)[c] | bf16(row 2s + 1)[c] << 16, rounded
// to nearest even by vcvtneps2bf16; columns past w and an odd klen's missing half zero.
template <int W>
CCTUNE_TARGET_AVX512BF16 void PackKMajorF32Bf16Pairs(const float* first, int64_t ld, int w,
                                                     int64_t p0, int64_t klen, uint32_t* dst) {
  const int64_t steps = (klen + 1) / 2;
  for (int64_t s = 0; s < steps; ++s) {
    const float* r0 = first + (p0 + 2 * s) * ld;
    const float* r1 = 2 * s + 1 < klen ? r0 + ld : nullptr;
    for (int c0 = 0; c0 < W; c0 += 16) {
      const int cols = std::clamp(w - c0, 0, 16);
      const __mmask16 mk = static_cast<__mmask16>((1u << cols) - 1u);
      const __m512i lo = _mm512_cvtepu16_epi32(
          reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mk, r0 + c0))));
      const __m512i hi =
          r1 != nullptr ? _mm512_cvtepu16_epi32(reinterpret_cast<__m256i>(
                              _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mk, r1 + c0))))
                        : _mm512_setzero_si512();
      const __m512i word = _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
      const int width = std::min(16, W - c0);
      _mm512_mask_storeu_epi32(dst + s * W + c0, static_cast<__mmask16>((1u << width) - 1u),
                               word);
    }
  }
}

// r[j] <- column j of the 8 x 8 matrix of floats whose row i is r[i].
CCTUNE_TARGET_AVX2 CCTUNE_INLINE void Transpose8x8(__m256 r[8]) {
  __m256 t[8], u[8];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
#pragma GCC unroll 2
  for (int g = 0; g < 2; ++g) {
    u[4 * g] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
    u[4 * g + 1] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0xee);
    u[4 * g + 2] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
    u[4 * g + 3] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xee);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
    r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
  }
}

// NR = 16 f32 panel (AVX2 kernel): 8 x 8 word transposes over whole blocks of 8 words (8 f32
// or 16 16-bit values), the rest of the block element by element.
CCTUNE_TARGET_AVX2 void PackBAvx2F32(const Args& p, int64_t j0, int nr, int64_t p0, int64_t klen,
                                 float* dst) {
  constexpr int NR = 16;
  const int64_t elem = static_cast<int64_t>(DTypeSize(p.b_dtype));
  const int64_t per = elem == 4 ? 8 : 16;
  const __m256i hi_mask = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  // Low (high) 16-bit halves of each 32-bit word to the low 8 bytes of each 128-bit lane.
  const __m256i lo_halves = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1,
                                             -1, 0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1,
                                             -1, -1);
  const __m256i hi_halves = _mm256_setr_epi8(2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1,
                                             -1, -1, 2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1,
                                             -1, -1, -1, -1);
  const int64_t whole = klen / per * per;
  for (int h = 0; h < 2; ++h) {
    const int rows = std::clamp(nr - 8 * h, 0, 8);
    float* d = dst + 8 * h;
    const char* base = static_cast<const char*>(p.b) + ((j0 + 8 * h) * p.ldb + p0) * elem;
    for (int64_t q0 = 0; q0 < whole; q0 += per) {
      __m256 w[8];
#pragma GCC unroll 8
      for (int r = 0; r < 8; ++r) {
        w[r] = r < rows ? _mm256_loadu_ps(reinterpret_cast<const float*>(
                              base + (r * p.ldb + q0) * elem))
                        : _mm256_setzero_ps();
      }
      Transpose8x8(w);
      float* dq = d + q0 * NR;
      if (elem == 4) {
#pragma GCC unroll 8
        for (int t = 0; t < 8; ++t) _mm256_storeu_ps(dq + t * NR, w[t]);
        continue;
      }
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t) {
        const __m256i v = _mm256_castps_si256(w[t]);
        __m256 lo, hi;
        if (p.b_dtype == DType::kBF16) {
          lo = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
          hi = _mm256_castsi256_ps(_mm256_and_si256(v, hi_mask));
        } else {
          const __m256i l = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(v, lo_halves), 0x08);
          const __m256i u = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(v, hi_halves), 0x08);
          lo = _mm256_cvtph_ps(_mm256_castsi256_si128(l));
          hi = _mm256_cvtph_ps(_mm256_castsi256_si128(u));
        }
        _mm256_storeu_ps(dq + 2 * t * NR, lo);
        _mm256_storeu_ps(dq + (2 * t + 1) * NR, hi);
      }
    }
    PackBF32Scalar<NR>(p, j0, nr, p0, whole, klen, 8 * h, 8, dst);
  }
}

// ---------------------------------------------------------------------------------------------
// The lines of B that a kernel call prefetches into L2 (the next micro-panel's rows of this
// k-block, while the kernels run on the current one). The AVX-512 kernels issue one every 4
// k-steps; issued in a burst before each call, they stalled on the full miss queue (perf:
// ~4% of a 128-row GEMM on the prefetch instructions). The lines are shared out evenly over
// the `calls` kernel calls that run on the current panel; BeginCall() hands the next its share.
struct PrefetchCursor {
  const char* row = nullptr;  // the current row's first byte in this k-block
  int64_t ld_bytes = 0, row_bytes = 0, at = 0, left = 0;
  int64_t remaining = 0, per_call = 0;

  PrefetchCursor() = default;
  // `rows` rows (none when <= 0; `first_row` is then not used) of `bytes` bytes each, ld_bytes
  // apart, over `calls` calls.
  PrefetchCursor(const char* first_row, int64_t ld, int64_t rows, int64_t bytes, int64_t calls) {
    if (rows <= 0 || calls <= 0) return;
    row = first_row;
    ld_bytes = ld;
    row_bytes = (bytes + 63) / 64 * 64;
    remaining = rows * (row_bytes / 64);
    per_call = (remaining + calls - 1) / calls;
  }
  void BeginCall() {
    left = std::min(per_call, remaining);
    remaining -= left;
  }

  CCTUNE_INLINE void Next() {
    if (left <= 0) return;
    _mm_prefetch(row + at, _MM_HINT_T1);
    if ((at += 64) == row_bytes) at = 0, row += ld_bytes;
    --left;
  }
  void Drain() {
    while (left > 0) Next();
  }
};

// ---------------------------------------------------------------------------------------------
// Micro-kernels: C tile [MR, NR] (row stride ldc) = A strip · B micro-panel over `steps`
// k-steps, + beta·C (beta == 0: C not read); they issue the cursor's prefetches.

// Row i of the tile (two vectors), masked to the tile's nr real columns (mask loads and stores
// neither fault nor touch memory past them).
CCTUNE_TARGET_AVX512 CCTUNE_INLINE void StoreRow512(float* c, __m512 v0, __m512 v1, float beta,
                                            __mmask16 m0, __mmask16 m1) {
  if (beta == 0.f) {
    _mm512_mask_storeu_ps(c, m0, v0);
    _mm512_mask_storeu_ps(c + 16, m1, v1);
  } else {
    const __m512 bv = _mm512_set1_ps(beta);
    _mm512_mask_storeu_ps(c, m0, _mm512_fmadd_ps(bv, _mm512_maskz_loadu_ps(m0, c), v0));
    _mm512_mask_storeu_ps(c + 16, m1,
                          _mm512_fmadd_ps(bv, _mm512_maskz_loadu_ps(m1, c + 16), v1));
  }
}

// The first `rows` (a template bound: the kernels below come in 12-, 8- and 4-row forms) of
// the tile's rows, mr of them real.
template <int ROWS>
CCTUNE_TARGET_AVX512 CCTUNE_INLINE void StoreTile512(const __m512* acc0, const __m512* acc1,
                                                     int mr, int nr, float* c, int64_t ldc,
                                                     float beta) {
  const __mmask16 m0 = static_cast<__mmask16>(nr >= 16 ? 0xffffu : (1u << nr) - 1u);
  const __mmask16 m1 = static_cast<__mmask16>(nr >= 32 ? 0xffffu : (1u << std::max(0, nr - 16)) - 1u);
#pragma GCC unroll 12
  for (int i = 0; i < ROWS; ++i) {
    if (i < mr) StoreRow512(c + i * ldc, acc0[i], acc1[i], beta, m0, m1);
  }
}

constexpr int kMr512 = 12;  // (PackAAvx512F32 and PackAAvx512Bf16Pairs store 12 words)

// The 12 x 32 kernels below run their first ROWS rows only (the A strip keeps its 12-word
// steps): a strip with mr <= 8 (m = 128 ends in one of 8 rows) or mr <= 4 does not spend
// 12 rows of multiply-adds on zero rows.
template <int ROWS>
CCTUNE_TARGET_AVX512 void KernelAvx512Rows(int64_t steps, const float* ap, const float* bp,
                                           float* c, int64_t ldc, float beta, int mr, int nr,
                                           PrefetchCursor* pf) {
  __m512 acc0[ROWS], acc1[ROWS];
#pragma GCC unroll 12
  for (int i = 0; i < ROWS; ++i) acc0[i] = acc1[i] = _mm512_setzero_ps();
  for (int64_t s = 0; s < steps; ++s) {
    const __m512 b0 = _mm512_loadu_ps(bp), b1 = _mm512_loadu_ps(bp + 16);
#pragma GCC unroll 12
    for (int i = 0; i < ROWS; ++i) {
      const __m512 av = _mm512_set1_ps(ap[i]);
      acc0[i] = _mm512_fmadd_ps(av, b0, acc0[i]);
      acc1[i] = _mm512_fmadd_ps(av, b1, acc1[i]);
    }
    ap += kMr512;
    bp += 32;
    if ((s & 3) == 3) pf->Next();
  }
  pf->Drain();
  StoreTile512<ROWS>(acc0, acc1, mr, nr, c, ldc, beta);
}

template <int ROWS>
CCTUNE_TARGET_AVX512BF16 void KernelAvx512Bf16Rows(int64_t steps, const uint32_t* ap,
                                                   const uint32_t* bp, float* c, int64_t ldc,
                                                   float beta, int mr, int nr,
                                                   PrefetchCursor* pf) {
  __m512 acc0[ROWS], acc1[ROWS];
#pragma GCC unroll 12
  for (int i = 0; i < ROWS; ++i) acc0[i] = acc1[i] = _mm512_setzero_ps();
  for (int64_t s = 0; s < steps; ++s) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(bp + 16);
#pragma GCC unroll 12
    for (int i = 0; i < ROWS; ++i) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(static_cast<int>(ap[i]));
      acc0[i] = _mm512_dpbf16_ps(acc0[i], av, b0);
      acc1[i] = _mm512_dpbf16_ps(acc1[i], av, b1);
    }
    ap += kMr512;
    bp += 32;
    if ((s & 3) == 3) pf->Next();
  }
  pf->Drain();
  StoreTile512<ROWS>(acc0, acc1, mr, nr, c, ldc, beta);
}

void KernelAvx512(int64_t steps, const float* ap, const float* bp, float* c, int64_t ldc,
                  float beta, int mr, int nr, PrefetchCursor* pf) {
  if (mr <= 4) return KernelAvx512Rows<4>(steps, ap, bp, c, ldc, beta, mr, nr, pf);
  if (mr <= 8) return KernelAvx512Rows<8>(steps, ap, bp, c, ldc, beta, mr, nr, pf);
  KernelAvx512Rows<kMr512>(steps, ap, bp, c, ldc, beta, mr, nr, pf);
}

void KernelAvx512Bf16(int64_t steps, const uint32_t* ap, const uint32_t* bp, float* c,
                      int64_t ldc, float beta, int mr, int nr, PrefetchCursor* pf) {
  if (mr <= 4) return KernelAvx512Bf16Rows<4>(steps, ap, bp, c, ldc, beta, mr, nr, pf);
  if (mr <= 8) return KernelAvx512Bf16Rows<8>(steps, ap, bp, c, ldc, beta, mr, nr, pf);
  KernelAvx512Bf16Rows<kMr512>(steps, ap, bp, c, ldc, beta, mr, nr, pf);
}

constexpr int kMr256 = 6;

CCTUNE_TARGET_AVX2 void KernelAvx2Full(int64_t steps, const float* ap, const float* bp, float* c,
                                   int64_t ldc, float beta) {
  constexpr int MR = kMr256;
  __m256 acc0[MR], acc1[MR];
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) acc0[i] = acc1[i] = _mm256_setzero_ps();
  for (int64_t s = 0; s < steps; ++s) {
    const __m256 b0 = _mm256_loadu_ps(bp), b1 = _mm256_loadu_ps(bp + 8);
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
      const __m256 av = _mm256_broadcast_ss(ap + i);
      acc0[i] = _mm256_fmadd_ps(av, b0, acc0[i]);
      acc1[i] = _mm256_fmadd_ps(av, b1, acc1[i]);
    }
    ap += MR;
    bp += 16;
  }
  const __m256 bv = _mm256_set1_ps(beta);
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) {
    float* ci = c + i * ldc;
    if (beta == 0.f) {
      _mm256_storeu_ps(ci, acc0[i]);
      _mm256_storeu_ps(ci + 8, acc1[i]);
    } else {
      _mm256_storeu_ps(ci, _mm256_fmadd_ps(bv, _mm256_loadu_ps(ci), acc0[i]));
      _mm256_storeu_ps(ci + 8, _mm256_fmadd_ps(bv, _mm256_loadu_ps(ci + 8), acc1[i]));
    }
  }
}

template <int MR, int NR>
void KernelScalarFull(int64_t steps, const float* ap, const float* bp, float* c, int64_t ldc,
                      float beta) {
  float acc[MR][NR] = {};
  for (int64_t s = 0; s < steps; ++s) {
    for (int i = 0; i < MR; ++i) {
      for (int j = 0; j < NR; ++j) acc[i][j] += ap[s * MR + i] * bp[s * NR + j];
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) {
      float* cij = c + i * ldc + j;
      *cij = beta == 0.f ? acc[i][j] : acc[i][j] + beta * *cij;
    }
  }
}

// A kernel for whole tiles made to take edge tiles: computed whole into a buffer, only the
// real mr x nr part added to C.
template <int MR, int NR, auto kFull>
void WithEdges(int64_t steps, const float* ap, const float* bp, float* c, int64_t ldc, float beta,
               int mr, int nr, PrefetchCursor* pf) {
  pf->Drain();  // (these kernels issue the call's prefetches up front)
  if (mr == MR && nr == NR) {
    kFull(steps, ap, bp, c, ldc, beta);
    return;
  }
  alignas(64) float tile[MR * NR];
  kFull(steps, ap, bp, tile, NR, 0.f);
  for (int r = 0; r < mr; ++r) {
    float* cr = c + r * ldc;
    for (int j = 0; j < nr; ++j) cr[j] = beta == 0.f ? tile[r * NR + j] : tile[r * NR + j] + beta * cr[j];
  }
}

// ---------------------------------------------------------------------------------------------
// Paths: element type of the packed operands, tile, k-step, blocks (kc, mc, nc), packers,
// kernel.

template <int NR>
void PackBScalar(const Args& p, int64_t j0, int nr, int64_t p0, int64_t klen, float* dst) {
  PackBF32Scalar<NR>(p, j0, nr, p0, 0, klen, 0, NR, dst);
}

template <typename Elem, int MR, int NR, int Step, int64_t Kc, int64_t Mc, int64_t Nc, auto kPackA,
          auto kPackB, auto kKernel>
struct Path {
  using T = Elem;
  static constexpr int kMR = MR, kNR = NR, kStep = Step;
  static constexpr PackedBlocking kBlock{MR, NR, Kc, Mc, Nc};
  static constexpr auto PackA = kPackA;
  static constexpr auto PackB = kPackB;
  static constexpr auto Kernel = kKernel;
};

using ScalarPath = Path<float, 4, 4, 1, 256, 64, 256, PackAF32<4>, PackBScalar<4>,
                        WithEdges<4, 4, KernelScalarFull<4, 4>>>;
// Zen 3: 32 KiB L1d (B micro-panel 256 x 16 f32 = 16 KiB), 512 KiB L2 (A block 144 x 256 f32 =
// 144 KiB).
using Avx2Path = Path<float, kMr256, 16, 1, 256, 144, 1024, PackAF32<kMr256>, PackBAvx2F32,
                      WithEdges<kMr256, 16, KernelAvx2Full>>;
// 48 KiB L1d (B micro-panel 192 x 32 f32 = 24 KiB, A strip 9 KiB), 2 MiB L2 (A block 480 x 192
// f32 = 360 KiB, B block 192 x 1024 f32 = 768 KiB).
using Avx512Path =
    Path<float, kMr512, 32, 1, 192, 480, 1024, PackAAvx512F32, PackBAvx512F32, KernelAvx512>;
// Pairs halve the bytes per k: B micro-panel 192 pairs x 32 = 24 KiB at kc = 384.
using Avx512Bf16Path = Path<uint32_t, kMr512, 32, 2, 384, 480, 1024, PackAAvx512Bf16Pairs,
                            PackBAvx512Bf16Pairs, KernelAvx512Bf16>;

// One thread's block of C: strips [s0, s1) of A (MR rows each) times B rows [j0, j1).
template <typename P>
void ComputeBlock(const Args& p, const typename P::T* apack, int64_t strips, int64_t strip_elems,
                  int64_t s0, int64_t s1, int64_t j0, int64_t j1) {
  using T = typename P::T;
  constexpr int MR = P::kMR, NR = P::kNR;
  const int64_t kc = P::kBlock.kc, nc = P::kBlock.nc, mc_strips = P::kBlock.mc / MR;
  const int64_t steps_max = kc / P::kStep;
  thread_local std::vector<T> bpack_storage;
  const size_t need = static_cast<size_t>(std::min(nc, (j1 - j0 + NR - 1) / NR * NR) * steps_max);
  if (bpack_storage.size() < need) bpack_storage.resize(need);
  T* bpack = bpack_storage.data();
  const char* b_bytes = static_cast<const char*>(p.b);
  const int64_t elem = static_cast<int64_t>(DTypeSize(p.b_dtype));
  for (int64_t jc = j0; jc < j1; jc += nc) {
    const int64_t jn = std::min(nc, j1 - jc);
    for (int64_t kb = 0; kb * kc < p.k; ++kb) {
      const int64_t p0 = kb * kc, klen = std::min(kc, p.k - p0);
      const int64_t steps = (klen + P::kStep - 1) / P::kStep;
      const float beta = kb == 0 ? p.beta : 1.f;
      for (int64_t ic = s0; ic < s1; ic += mc_strips) {
        const int64_t ie = std::min(s1, ic + mc_strips);
        for (int64_t jr = 0; jr < jn; jr += NR) {
          T* bp = bpack + (jr / NR) * steps * NR;
          const int nr = static_cast<int>(std::min<int64_t>(NR, jn - jr));
          // The first m block packs each micro-panel just before its first use, and while the
          // kernels run on it, prefetches the next micro-panel's rows of B into L2 (B comes
          // from DRAM once per call; this overlaps that read with the arithmetic).
          const bool first = ic == s0;
          if (first) {
            if constexpr (std::is_same_v<T, float>) {
              if (p.b_kmajor) {
                PackKMajorF32<NR>(static_cast<const float*>(p.b) + jc + jr, p.ldb, nr, p0, klen,
                                  bp);
              } else {
                P::PackB(p, jc + jr, nr, p0, klen, bp);
              }
            } else if (p.b_kmajor && p.b_dtype == DType::kF32) {
              PackKMajorF32Bf16Pairs<NR>(static_cast<const float*>(p.b) + jc + jr, p.ldb, nr, p0,
                                         klen, bp);
            } else if (p.b_kmajor) {
              PackKMajorBf16Pairs(p, jc + jr, nr, p0, klen, bp);
            } else {
              P::PackB(p, jc + jr, nr, p0, klen, bp);
            }
          }
          // (k-major B: its next micro-panel is in the rows just read; no prefetch.)
          const int64_t next_rows =
              first && !p.b_kmajor ? std::min<int64_t>(NR, jn - jr - NR) : 0;
          PrefetchCursor pf(next_rows > 0 ? b_bytes + ((jc + jr + NR) * p.ldb + p0) * elem
                                          : nullptr,
                            p.ldb * elem, next_rows, klen * elem, ie - ic);
          for (int64_t st = ic; st < ie; ++st) {
            pf.BeginCall();
            const T* ap = apack + (kb * strips + st) * strip_elems;
            const int64_t i = st * MR;
            const int mr = static_cast<int>(std::min<int64_t>(MR, p.m - i));
            P::Kernel(steps, ap, bp, p.c + i * p.ldc + jc + jr, p.ldc, beta, mr, nr, &pf);
          }
        }
      }
    }
  }
}

// Splits [0, n) into `parts` nearly equal ranges of whole units of `align`.
void Split(int64_t n, int parts, int index, int64_t align, int64_t* begin, int64_t* end) {
  const int64_t units = (n + align - 1) / align;
  const int64_t per = units / parts, extra = units % parts;
  const int64_t u0 = index * per + std::min<int64_t>(index, extra);
  const int64_t u1 = u0 + per + (index < extra ? 1 : 0);
  *begin = std::min(n, u0 * align);
  *end = std::min(n, u1 * align);
}

// Thread `tid` of `nt`'s block of C: strips [s0, s1) of A times columns [j0, j1). Threads split
// n in units of `unit` columns, or m in strips when n gives fewer than two units per thread.
struct WorkBlock {
  int64_t s0, s1, j0, j1;
  bool empty() const { return s0 >= s1 || j0 >= j1; }
};
WorkBlock SplitWork(int64_t strips, int64_t n, int64_t unit, int nt, int tid) {
  WorkBlock w{0, strips, 0, n};
  if ((n + unit - 1) / unit >= 2 * nt || strips < nt) {
    Split(n, nt, tid, unit, &w.j0, &w.j1);
  } else {
    Split(strips, nt, tid, 1, &w.s0, &w.s1);
  }
  return w;
}

// The calling thread's buffer for packed A, at least `elems` long (kept from call to call;
// the call's threads share it).
template <typename T>
T* PackedABuffer(int64_t elems) {
  thread_local std::vector<T> storage;
  if (storage.size() < static_cast<size_t>(elems)) storage.resize(static_cast<size_t>(elems));
  return storage.data();
}

template <typename P>
void RunPacked(const Args& p) {
  using T = typename P::T;
  constexpr int MR = P::kMR, NR = P::kNR;
  const int64_t kc = P::kBlock.kc;
  const int64_t strips = (p.m + MR - 1) / MR, kblocks = (p.k + kc - 1) / kc;
  const int64_t strip_elems = kc / P::kStep * MR;
  // A packed once for all threads: [k-block][strip][step][MR].
  T* apack = PackedABuffer<T>(kblocks * strips * strip_elems);
  const bool parallel = p.m * p.n * p.k >= kMinParallelMacs && !omp_in_parallel();
#pragma omp parallel if (parallel)
  {
#pragma omp for schedule(static)
    for (int64_t t = 0; t < kblocks * strips; ++t) {
      const int64_t kb = t / strips, st = t % strips, p0 = kb * kc;
      const int mr = static_cast<int>(std::min<int64_t>(MR, p.m - st * MR));
      if (p.a_kmajor) {
        if constexpr (std::is_same_v<T, float>) {
          PackKMajorF32<MR>(p.a + st * MR, p.lda, mr, p0, std::min(kc, p.k - p0),
                            apack + t * strip_elems);
        } else {
          PackKMajorF32Bf16Pairs<MR>(p.a + st * MR, p.lda, mr, p0, std::min(kc, p.k - p0),
                                     apack + t * strip_elems);
        }
        continue;
      }
      P::PackA(p, st * MR, mr, p0, std::min(kc, p.k - p0), apack + t * strip_elems);
    }
    // (the loop's barrier: A is packed) Threads split n in micro-panels, or m in strips.
    const WorkBlock w = SplitWork(strips, p.n, NR, omp_get_num_threads(), omp_get_thread_num());
    if (!w.empty()) ComputeBlock<P>(p, apack, strips, strip_elems, w.s0, w.s1, w.j0, w.j1);
  }
}

// ---------------------------------------------------------------------------------------------
// The bf16 B-broadcast path (PackedGemmNT on kAvx512Bf16): B's rows as stored, never transposed.
//
// Its register tile is the transpose of the pair kernel's: kBcastNr = 12 rows of B, one
// 32-bit pair of each broadcast per k-step straight from B's row-major storage, times
// kBcastMr = 32 rows of A (two vectors of packed A pairs): 24 accumulators, 14 loads and
// 24 vdpbf16ps per step, as the pair kernel. That kernel's B micro-panels cost 10-15% of a
// 128-row GEMM in transposes (perf, one thread, with B in L2 or not alike); here only A (m x k,
// small in prefill) is packed, into 32-row strips of pairs. A tile sums a whole k-block of
// kBcastKc values, then is transposed in registers (two 16 x 16 word transposes) and stored
// once per k-block.
//
// Loops per thread: m in blocks of kBcastMc rows (the block's packed A, 512 KiB at the 2048
// k-block, stays in L2), k in blocks of kBcastKc, the thread's groups of 12 rows of B (their
// k-block, 12 x 4 KiB, in one of the thread's two group buffers), then the block's strips.
// While a group's tiles run, their loops copy the next group into the other buffer, a 64-byte
// line every 4 k-steps, and prefetch the group after it line for line (GroupCopyCursor): a
// memcpy of each group between its tiles cost ~3% of an m = 128 GEMM (0.3 of 10.4 ms at n =
// 8192, k = 2048, measured by copying 11 times), and the copy in the loops took those GEMMs
// from 386-418 to 391-429 GFLOP/s, the 1.1B model's 128-token prefill from 193-199 to 196-204
// tokens/s (Zen 4, alternating runs). Threads take the groups one by one (GroupClaims: own
// share first, then the others' from their ends), each thread the same groups in every
// k-block of a block of rows: the same speed on a quiet machine, and 4-6% faster (m = 128
// GEMMs) while another process takes ~14% of one core (a nice 8 busy loop), which a static
// split waited for.
//
// The copy is there for the L1 sets, not for a layout: a weight's rows are k x 2 bytes apart,
// a multiple of 4 KiB for every Llama shape (k = 2048, 8192, ...), so the tile's 12 current
// lines (one per row) all fall in one set of the 8-way 32 KiB L1 and evict each other on
// every step. In the buffer the rows are kBcastLds values apart, 64 bytes more than the
// k-block, so they fall in 12 consecutive sets. On Zen 4 (2 threads, m = 128, k = 2048) that
// took the bf16 prefill GEMMs from 270-330 to 380-410 GFLOP/s of the 461 GFLOP/s vdpbf16ps
// peak, the same as calling them with rows padded by 64 bytes, and the 1.1B model's 128-token
// prefill from 125-132 to 161-181 tokens/s (generate profile=true, alternating runs).
//
// Each C element is the same sequence of operations whatever m, n, the block or the thread
// (batch-invariant, as GemmNT's bf16 routes must be); the copy changes no value.
constexpr int kBcastMr = 32, kBcastNr = 12;
constexpr int64_t kBcastKc = 2048, kBcastMc = 128;
// It needs k-blocks long enough to pay for the tile's transposed store, or a B large enough
// that packing it costs more than that: from k = 1024, or B of 4 MiB. Below, the pair
// micro-panels stay ahead (one run, 2 threads, B in cache, GFLOP/s pairs / in place: m x n x k
// = 1024 x 128 x 128 722 / 565, 1024 x 1024 x 384 809 / 696; in place ahead at 128 x 384 x
// 1024 709 / 846, 128 x 3072 x 2048 630-645 / 694-878; 1024 x 8192 x 384 718 / 739). A rule
// of n and k alone: a row's result does not depend on m (batch invariance, gemm.h).
constexpr int64_t kBcastMinK = 1024, kBcastMinBBytes = int64_t{4} << 20;
constexpr int64_t kBcastLds = kBcastKc + 32;  // the group buffer's row stride, in bf16 values

// The next group's k-block, copied into the thread's other group buffer a line at a time by
// the tile loops (one line every 4 k-steps, in load and store slots the multiply-adds leave
// idle), while the group after it is prefetched line for line (`prefetch_offset` bytes further
// in B; 0 when there is none: the line being copied). `rows` rows of `bytes` bytes each,
// ld_bytes apart in B and dst_ld_bytes apart in the buffer, spread over `calls` tile calls.
// It copies a row's whole 64-byte lines only, so nothing past its `bytes` is read; the caller
// copies the rest (a k-block of klen % 32 != 0 values) after the last call.
struct GroupCopyCursor {
  const char* row = nullptr;  // the current row's first byte in B's k-block
  char* dst = nullptr;        // the current row's first byte in the buffer
  int64_t ld_bytes = 0, dst_ld_bytes = 0, line_bytes = 0, prefetch_offset = 0;
  int64_t at = 0, left = 0, remaining = 0, per_call = 0;

  GroupCopyCursor() = default;
  GroupCopyCursor(const char* first_row, int64_t ld, char* first_dst, int64_t dst_ld,
                  int64_t rows, int64_t row_bytes, int64_t calls, int64_t prefetch_off) {
    if (rows <= 0 || calls <= 0) return;
    row = first_row;
    dst = first_dst;
    ld_bytes = ld;
    dst_ld_bytes = dst_ld;
    line_bytes = row_bytes / 64 * 64;
    prefetch_offset = prefetch_off;
    remaining = rows * (line_bytes / 64);
    per_call = (remaining + calls - 1) / calls;
  }
  void BeginCall() {
    left = std::min(per_call, remaining);
    remaining -= left;
  }
  CCTUNE_TARGET_AVX512BF16 CCTUNE_INLINE void Next() {
    if (left <= 0) return;
    _mm_prefetch(row + prefetch_offset + at, _MM_HINT_T1);
    // The store is hidden from the compiler (a volatile asm with no memory operands, ordered
    // before the kernel's later reads by Drain's compiler barrier): a store it could see might
    // alias the accumulator array, and it then kept the 24 accumulators in memory, storing
    // them on every k-step (2.5x slower).
    __m512i t;
    __asm__ volatile("vmovdqu64 (%1), %0\n\t"
                     "vmovdqu64 %0, (%2)"
                     : "=&v"(t)
                     : "r"(row + at), "r"(dst + at));
    if ((at += 64) == line_bytes) at = 0, row += ld_bytes, dst += dst_ld_bytes;
    --left;
  }
  CCTUNE_TARGET_AVX512BF16 void Drain() {
    while (left > 0) Next();
    __asm__ volatile("" ::: "memory");  // the copies' stores, made known
  }
};

// Strip of A rows [i0, i0 + mr) (mr <= 32, rows past it zero) of k-block [p0, p0 + klen) as
// bf16 pairs: dst[s * 32 + r] = bf16(a[i0 + r][p0 + 2s]) | bf16(a[i0 + r][p0 + 2s + 1]) << 16,
// an odd klen's last pair with a zero high half.
CCTUNE_TARGET_AVX512BF16 void PackABcastStrip(const Args& p, int64_t i0, int mr, int64_t p0,
                                              int64_t klen, uint32_t* dst) {
  for (int64_t q0 = 0; q0 < klen; q0 += 32) {
    const int64_t valid = std::min<int64_t>(32, klen - q0);
    const __mmask16 mlo = static_cast<__mmask16>(valid >= 16 ? 0xffffu : (1u << valid) - 1u);
    const __mmask16 mhi = static_cast<__mmask16>(
        valid >= 32 ? 0xffffu : (1u << std::max<int64_t>(0, valid - 16)) - 1u);
    for (int h = 0; h < 2; ++h) {
      __m512i w[16];
#pragma GCC unroll 16
      for (int r = 0; r < 16; ++r) {
        if (16 * h + r < mr) {
          const float* src = p.a + (i0 + 16 * h + r) * p.lda + p0 + q0;
          w[r] = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(
              _mm512_maskz_loadu_ps(mhi, src + 16), _mm512_maskz_loadu_ps(mlo, src)));
        } else {
          w[r] = _mm512_setzero_si512();
        }
      }
      Transpose16x16(w);
      for (int64_t t = 0; 2 * t < valid; ++t) {
        _mm512_storeu_si512(dst + (q0 / 2 + t) * kBcastMr + 16 * h, w[t]);
      }
    }
  }
}

// C tile (+)= A strip [mr <= 16·HALVES rows] x B rows [nr <= ROWS] over klen k-values: mode
// 0 C = tile, 1 C = beta·C + tile, 2 C += tile. B rows past nr are not read. HALVES = 1 for a
// strip of at most 16 rows (short prompts: m = 16..31 ends in one), which then does not spend
// half its multiply-adds on zero rows. FULL (nr == ROWS) addresses B's rows from one base per
// 3 rows plus 0, 1 or 2 strides, so that the loop's pointers fit the 15 general registers: a
// pointer per row spilled 2 of them into the loop (perf), and this took the m = 128 prefill
// GEMMs from 66-81% of the vdpbf16ps peak to 79-88% on Zen 4 (gemm_bench). The prefetch cursor
// is copied into a local for the same reason (through `pf` it was stored on every step).
template <int ROWS, int HALVES, bool FULL>
CCTUNE_TARGET_AVX512BF16 void BcastKernel(int64_t klen, const uint32_t* ap, const uint16_t* b,
                                          int64_t ldb, int nr, float* c, int64_t ldc, int mr,
                                          int mode, float beta, GroupCopyCursor* pf) {
  const uint16_t* rows[ROWS];
#pragma GCC unroll 12
  for (int j = 0; j < ROWS; ++j) rows[j] = b + (j < nr ? j : 0) * ldb;
  constexpr int kBases = (ROWS + 2) / 3;
  const char* base[kBases];  // FULL only (a partial group's rows 3q may lie past B's end)
#pragma GCC unroll 4
  for (int q = 0; q < kBases; ++q) {
    base[q] = FULL ? reinterpret_cast<const char*>(b + 3 * q * ldb) : nullptr;
  }
  const int64_t ldb_bytes = ldb * 2;
  GroupCopyCursor cursor = *pf;  // a local copy the loop keeps in registers
  __m512 acc[HALVES][ROWS];
#pragma GCC unroll 2
  for (int h = 0; h < HALVES; ++h) {
#pragma GCC unroll 12
    for (int j = 0; j < ROWS; ++j) acc[h][j] = _mm512_setzero_ps();
  }
  const int64_t steps = klen / 2;
  for (int64_t s = 0; s < steps; ++s) {
    __m512bh av[HALVES];
#pragma GCC unroll 2
    for (int h = 0; h < HALVES; ++h) av[h] = (__m512bh)_mm512_loadu_si512(ap + 16 * h);
#pragma GCC unroll 12
    for (int j = 0; j < ROWS; ++j) {
      int32_t pair;
      if constexpr (FULL) {
        std::memcpy(&pair, base[j / 3] + (j % 3) * ldb_bytes, sizeof(pair));
      } else {
        std::memcpy(&pair, rows[j] + 2 * s, sizeof(pair));
      }
      const __m512bh bv = (__m512bh)_mm512_set1_epi32(pair);
#pragma GCC unroll 2
      for (int h = 0; h < HALVES; ++h) acc[h][j] = _mm512_dpbf16_ps(acc[h][j], bv, av[h]);
    }
    if constexpr (FULL) {
#pragma GCC unroll 4
      for (int q = 0; q < kBases; ++q) base[q] += 4;
    }
    ap += kBcastMr;
    if ((s & 3) == 3) cursor.Next();
  }
  if (klen & 1) {  // the last value alone: A's pair has a zero high half, B's is not read
    __m512bh av[HALVES];
#pragma GCC unroll 2
    for (int h = 0; h < HALVES; ++h) av[h] = (__m512bh)_mm512_loadu_si512(ap + 16 * h);
#pragma GCC unroll 12
    for (int j = 0; j < ROWS; ++j) {
      const __m512bh bv = (__m512bh)_mm512_set1_epi32(static_cast<int32_t>(rows[j][klen - 1]));
#pragma GCC unroll 2
      for (int h = 0; h < HALVES; ++h) acc[h][j] = _mm512_dpbf16_ps(acc[h][j], bv, av[h]);
    }
  }
  cursor.Drain();
  *pf = cursor;
  const __mmask16 cols = static_cast<__mmask16>((1u << nr) - 1u);
  const __m512 bv = _mm512_set1_ps(beta);
  for (int h = 0; h < HALVES && 16 * h < mr; ++h) {
    __m512i w[16];
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) {
      w[j] = j < ROWS ? _mm512_castps_si512(acc[h][j < ROWS ? j : 0]) : _mm512_setzero_si512();
    }
    Transpose16x16(w);  // w[r] lane j: C[16h + r][j]
    const int rows_here = std::min(16, mr - 16 * h);
    for (int r = 0; r < rows_here; ++r) {
      float* cr = c + (16 * h + r) * ldc;
      __m512 v = _mm512_castsi512_ps(w[r]);
      if (mode == 2) {
        v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(cols, cr));
      } else if (mode == 1) {
        v = _mm512_fmadd_ps(bv, _mm512_maskz_loadu_ps(cols, cr), v);
      }
      _mm512_mask_storeu_ps(cr, cols, v);
    }
  }
}

template <int HALVES>
void BcastTileHalves(int64_t klen, const uint32_t* ap, const uint16_t* b, int64_t ldb, int nr,
                     float* c, int64_t ldc, int mr, int mode, float beta, GroupCopyCursor* pf) {
  if (nr == kBcastNr) {
    return BcastKernel<kBcastNr, HALVES, true>(klen, ap, b, ldb, nr, c, ldc, mr, mode, beta, pf);
  }
  if (nr <= 4) {
    return BcastKernel<4, HALVES, false>(klen, ap, b, ldb, nr, c, ldc, mr, mode, beta, pf);
  }
  if (nr <= 8) {
    return BcastKernel<8, HALVES, false>(klen, ap, b, ldb, nr, c, ldc, mr, mode, beta, pf);
  }
  BcastKernel<kBcastNr, HALVES, false>(klen, ap, b, ldb, nr, c, ldc, mr, mode, beta, pf);
}

void BcastTile(int64_t klen, const uint32_t* ap, const uint16_t* b, int64_t ldb, int nr, float* c,
               int64_t ldc, int mr, int mode, float beta, GroupCopyCursor* pf) {
  if (mr <= 16) return BcastTileHalves<1>(klen, ap, b, ldb, nr, c, ldc, mr, mode, beta, pf);
  BcastTileHalves<2>(klen, ap, b, ldb, nr, c, ldc, mr, mode, beta, pf);
}

// Groups of 12 rows of B shared out one at a time: a thread claims its own share (Split) front
// to back, then the other threads' shares back to front, each group by an atomic exchange of
// its flag, so every group runs exactly once and a thread that falls behind (a vCPU the host
// gives less time: steal of 1-7% on our 2-vCPU machines) has its last groups taken by the
// other; a static split waited for it at the parallel region's end (libgomp's spin was ~2% of
// a 1.1B prefill). Which thread computes a group changes no value (batch invariance).
class GroupClaims {
 public:
  GroupClaims(std::atomic<uint8_t>* flags, int64_t groups, int nt, int tid)
      : flags_(flags), groups_(groups), nt_(nt), tid_(tid) {
    Split(groups, nt, tid, 1, &pos_, &end_);
  }
  // The next group claimed, or -1 when every group is taken.
  int64_t Next() {
    while (pos_ < end_) {
      const int64_t g = pos_++;
      if (Claim(g)) return g;
    }
    while (victim_ < nt_) {
      if (!victim_started_) {
        int64_t begin = 0, end = 0;
        Split(groups_, nt_, (tid_ + victim_) % nt_, 1, &begin, &end);
        vbegin_ = begin;
        vpos_ = end - 1;
        victim_started_ = true;
      }
      while (vpos_ >= vbegin_) {
        const int64_t g = vpos_--;
        if (Claim(g)) return g;
      }
      ++victim_;
      victim_started_ = false;
    }
    return -1;
  }

 private:
  bool Claim(int64_t g) {
    return flags_[g].load(std::memory_order_relaxed) == 0 &&
           flags_[g].exchange(1, std::memory_order_relaxed) == 0;
  }
  std::atomic<uint8_t>* flags_;
  int64_t groups_;
  int nt_, tid_;
  int64_t pos_ = 0, end_ = 0;  // this thread's share, front to back
  int victim_ = 1;             // the other shares, tid + 1, tid + 2, ... (mod nt)
  bool victim_started_ = false;
  int64_t vbegin_ = 0, vpos_ = -1;
};

void RunBcastBf16(const Args& p) {
  const int64_t strips = (p.m + kBcastMr - 1) / kBcastMr;
  const int64_t kblocks = (p.k + kBcastKc - 1) / kBcastKc;
  const int64_t strip_words = (kBcastKc + 1) / 2 * kBcastMr;
  // A packed once for all threads: [k-block][strip][pair][32].
  uint32_t* apack = PackedABuffer<uint32_t>(kblocks * strips * strip_words);
  const uint16_t* b = static_cast<const uint16_t*>(p.b);
  const bool parallel = p.m * p.n * p.k >= kMinParallelMacs && !omp_in_parallel();
  // A claim flag per group of 12 rows of B and block of kBcastMc rows of A (GroupClaims).
  const int64_t n_groups = (p.n + kBcastNr - 1) / kBcastNr;
  const int64_t rounds = (strips + kBcastMc / kBcastMr - 1) / (kBcastMc / kBcastMr);
  // (the calling thread's, kept from call to call as PackedABuffer's: no allocation per call)
  thread_local std::unique_ptr<std::atomic<uint8_t>[]> claim_storage;
  thread_local int64_t claim_capacity = 0;
  if (claim_capacity < rounds * n_groups) {
    claim_capacity = rounds * n_groups;
    claim_storage.reset(new std::atomic<uint8_t>[static_cast<size_t>(claim_capacity)]);
  }
  std::atomic<uint8_t>* claim_flags = claim_storage.get();
  for (int64_t i = 0; i < rounds * n_groups; ++i) {
    claim_flags[i].store(0, std::memory_order_relaxed);
  }
#pragma omp parallel if (parallel)
  {
#pragma omp for schedule(static)
    for (int64_t t = 0; t < kblocks * strips; ++t) {
      const int64_t kb = t / strips, st = t % strips, p0 = kb * kBcastKc;
      const int mr = static_cast<int>(std::min<int64_t>(kBcastMr, p.m - st * kBcastMr));
      PackABcastStrip(p, st * kBcastMr, mr, p0, std::min(kBcastKc, p.k - p0),
                      apack + t * strip_words);
    }
    // (the loop's barrier: A is packed) Threads split n in groups of 12 rows of B (claimed
    // one by one, GroupClaims), or m in strips.
    const int nt = omp_get_num_threads(), tid = omp_get_thread_num();
    const WorkBlock w = SplitWork(strips, p.n, kBcastNr, nt, tid);
    // (SplitWork's choice, the same in every thread)
    const bool split_n = nt > 1 && (n_groups >= 2 * nt || strips < nt);
    constexpr int64_t mc_strips = kBcastMc / kBcastMr;
    // Two group buffers: the tiles read one while their loops copy the next group into the
    // other.
    thread_local std::vector<uint16_t> group_storage;
    if (group_storage.size() < static_cast<size_t>(2 * kBcastNr * kBcastLds)) {
      group_storage.resize(static_cast<size_t>(2 * kBcastNr * kBcastLds));
    }
    const int64_t ld_bytes = p.ldb * 2;
    // One k-block of strips [ms, me) against the groups next_group() gives (-1: no more), in
    // that order. The first group is copied here, each later one by the tiles before it.
    auto sweep = [&](int64_t ms, int64_t me, int64_t kb, auto&& next_group) {
      const int64_t p0 = kb * kBcastKc, klen = std::min(kBcastKc, p.k - p0);
      const int mode = kb > 0 ? 2 : p.beta == 0.f ? 0 : 1;
      const auto rows_of = [&](int64_t g) {
        return std::min<int64_t>(kBcastNr, p.n - g * kBcastNr);
      };
      int64_t cur = next_group();
      for (int64_t r = 0; cur >= 0 && r < rows_of(cur); ++r) {
        std::memcpy(group_storage.data() + r * kBcastLds, b + (cur * kBcastNr + r) * p.ldb + p0,
                    static_cast<size_t>(klen) * sizeof(uint16_t));
      }
      for (int64_t g = 0; cur >= 0; ++g) {
        const int64_t nxt = next_group();
        const int64_t j = cur * kBcastNr;
        const int nr = static_cast<int>(rows_of(cur));
        uint16_t* group = group_storage.data() + (g & 1) * kBcastNr * kBcastLds;
        uint16_t* next = group_storage.data() + ((g + 1) & 1) * kBcastNr * kBcastLds;
        const int64_t next_rows = nxt >= 0 ? rows_of(nxt) : 0;
        // The group after next is likely the one beyond it in the same direction: prefetched.
        const int64_t after = nxt + (nxt - cur);
        const int64_t pf_offset =
            nxt >= 0 && after >= 0 && after * kBcastNr < p.n ? (after - nxt) * kBcastNr * ld_bytes
                                                             : 0;
        GroupCopyCursor pf(
            next_rows > 0 ? reinterpret_cast<const char*>(b + nxt * kBcastNr * p.ldb + p0)
                          : nullptr,
            ld_bytes, reinterpret_cast<char*>(next), kBcastLds * 2, next_rows, klen * 2, me - ms,
            pf_offset);
        for (int64_t st = ms; st < me; ++st) {
          pf.BeginCall();
          const int64_t i = st * kBcastMr;
          const int mr = static_cast<int>(std::min<int64_t>(kBcastMr, p.m - i));
          BcastTile(klen, apack + (kb * strips + st) * strip_words, group, kBcastLds, nr,
                    p.c + i * p.ldc + j, p.ldc, mr, mode, p.beta, &pf);
        }
        const int64_t copied = klen * 2 / 64 * 32;  // values per row the cursor copied
        for (int64_t r = 0; r < next_rows && copied < klen; ++r) {
          std::memcpy(next + r * kBcastLds + copied, b + (nxt * kBcastNr + r) * p.ldb + p0 + copied,
                      static_cast<size_t>(klen - copied) * sizeof(uint16_t));
        }
        cur = nxt;
      }
    };
    if (!split_n) {
      const int64_t groups = (w.j1 - w.j0 + kBcastNr - 1) / kBcastNr;  // all of n here
      for (int64_t ms = w.s0; !w.empty() && ms < w.s1; ms += mc_strips) {
        for (int64_t kb = 0; kb < kblocks; ++kb) {
          int64_t g = 0;
          sweep(ms, std::min(w.s1, ms + mc_strips), kb,
                [&] { return g < groups ? g++ : int64_t{-1}; });
        }
      }
    } else {
      // Per block of kBcastMc rows: the groups this thread claims in the first k-block, in
      // order, then the same groups for the later k-blocks (which add to the first's C).
      thread_local std::vector<int64_t> mine;
      for (int64_t ms = 0, round = 0; ms < strips; ms += mc_strips, ++round) {
        GroupClaims claims(claim_flags + round * n_groups, n_groups, nt, tid);
        mine.clear();
        for (int64_t kb = 0; kb < kblocks; ++kb) {
          size_t at = 0;
          sweep(ms, std::min(strips, ms + mc_strips), kb, [&]() -> int64_t {
            if (kb == 0) {
              const int64_t g = claims.Next();
              if (g >= 0) mine.push_back(g);
              return g;
            }
            return at < mine.size() ? mine[at++] : -1;
          });
        }
      }
    }
  }
}

IsaLevel LevelOf(PackedIsa isa) {
  switch (isa) {
    case PackedIsa::kAvx2:
      return IsaLevel::kAvx2;
    case PackedIsa::kAvx512:
      return IsaLevel::kAvx512;
    case PackedIsa::kAvx512Bf16:
      return IsaLevel::kAvx512Bf16;
    default:
      return IsaLevel::kScalar;
  }
}

// C = beta·C (k == 0); beta == 0 writes zeros without reading C.
void ScaleC(int64_t m, int64_t n, float* c, int64_t ldc, float beta) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.f ? 0.f : beta * c[i * ldc + j];
  }
}

void Run(PackedIsa isa, const Args& p);  // the path's RunPacked (below the public functions)

}  // namespace

const char* PackedIsaName(PackedIsa isa) { return IsaLevelName(LevelOf(isa)); }

bool PackedIsaSupported(PackedIsa isa) { return IsaSupported(LevelOf(isa)); }

PackedIsa BestPackedIsa() {
  if (IsaSupported(IsaLevel::kAvx512)) return PackedIsa::kAvx512;
  if (IsaSupported(IsaLevel::kAvx2)) return PackedIsa::kAvx2;
  return PackedIsa::kScalar;
}

PackedBlocking PackedGemmBlocking(PackedIsa isa) {
  switch (isa) {
    case PackedIsa::kAvx2:
      return Avx2Path::kBlock;
    case PackedIsa::kAvx512:
      return Avx512Path::kBlock;
    case PackedIsa::kAvx512Bf16:
      return Avx512Bf16Path::kBlock;
    default:
      return ScalarPath::kBlock;
  }
}

namespace {
// The checks every entry point shares (path supported here, sizes >= 0, C's stride), then the
// calls with nothing to multiply: true when the call is done (m or n zero: nothing to write;
// k zero: C = beta·C).
bool CheckedAndTrivial(const char* op, PackedIsa isa, int64_t m, int64_t n, int64_t k, float* c,
                       int64_t ldc, float beta) {
  CCTUNE_CHECK(PackedIsaSupported(isa), "", op, ": path ", PackedIsaName(isa),
               " is not supported on this CPU");
  CCTUNE_CHECK(m >= 0 && n >= 0 && k >= 0, "", op, ": negative size m=", m, " n=", n, " k=", k);
  CCTUNE_CHECK(m <= 1 || ldc >= n, "", op, ": ldc (", ldc, ") < n (", n, ")");
  if (m == 0 || n == 0) return true;
  if (k == 0) {
    ScaleC(m, n, c, ldc, beta);
    return true;
  }
  return false;
}
}  // namespace

void PackedGemmNT(PackedIsa isa, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                  const void* b, DType b_dtype, int64_t ldb, float* c, int64_t ldc, float beta) {
  CCTUNE_CHECK(b_dtype == DType::kF32 || b_dtype == DType::kBF16 || b_dtype == DType::kF16,
               "PackedGemmNT: b_dtype must be f32, bf16 or f16, got ", DTypeName(b_dtype));
  CCTUNE_CHECK(isa != PackedIsa::kAvx512Bf16 || b_dtype == DType::kBF16,
               "PackedGemmNT: the avx512_bf16 path needs bf16 B, got ", DTypeName(b_dtype));
  CCTUNE_CHECK(m <= 1 || lda >= k, "PackedGemmNT: lda (", lda, ") < k (", k, ")");
  CCTUNE_CHECK(n <= 1 || ldb >= k, "PackedGemmNT: ldb (", ldb, ") < k (", k, ")");
  if (CheckedAndTrivial("PackedGemmNT", isa, m, n, k, c, ldc, beta)) return;
  const Args p{m, n, k, a, lda, b, b_dtype, ldb, c, ldc, beta};
  Run(isa, p);
}

void PackedGemmNN(PackedIsa isa, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                  const void* b, DType b_dtype, int64_t ldb, float* c, int64_t ldc, float beta) {
  CCTUNE_CHECK((isa == PackedIsa::kAvx512Bf16) == (b_dtype == DType::kBF16) &&
                   (b_dtype == DType::kBF16 || b_dtype == DType::kF32),
               "PackedGemmNN: bf16 B takes the avx512_bf16 path and f32 B an f32 path, got ",
               DTypeName(b_dtype), " B on ", PackedIsaName(isa));
  if (b_dtype == DType::kF32) {
    PackedSgemm(isa, false, false, m, n, k, a, lda, static_cast<const float*>(b), ldb, c, ldc,
                beta);
    return;
  }
  CCTUNE_CHECK(m <= 1 || lda >= k, "PackedGemmNN: lda (", lda, ") < k (", k, ")");
  CCTUNE_CHECK(k <= 1 || ldb >= n, "PackedGemmNN: ldb (", ldb, ") < n (", n, ")");
  if (CheckedAndTrivial("PackedGemmNN", isa, m, n, k, c, ldc, beta)) return;
  Args p{m, n, k, a, lda, b, b_dtype, ldb, c, ldc, beta};
  p.b_kmajor = true;
  Run(isa, p);
}

void PackedSgemm(PackedIsa isa, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                 const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                 float beta) {
  CCTUNE_CHECK(isa != PackedIsa::kAvx512Bf16 || !trans_b,
               "PackedSgemm: the avx512_bf16 path takes B as [k, n] (trans_b false)");
  CCTUNE_CHECK(lda >= std::max<int64_t>(1, trans_a ? m : k), "PackedSgemm: lda (", lda,
               ") too small");
  CCTUNE_CHECK(ldb >= std::max<int64_t>(1, trans_b ? k : n), "PackedSgemm: ldb (", ldb,
               ") too small");
  if (CheckedAndTrivial("PackedSgemm", isa, m, n, k, c, ldc, beta)) return;
  Args p{m, n, k, a, lda, b, DType::kF32, ldb, c, ldc, beta};
  p.a_kmajor = trans_a;
  p.b_kmajor = !trans_b;
  Run(isa, p);
}

namespace {

void Run(PackedIsa isa, const Args& p) {
  switch (isa) {
    case PackedIsa::kAvx512Bf16:
      // B rows in the Linear shape (PackedGemmNT): never transposed. k-major B (PackedGemmNN,
      // PackedSgemm's dY·W and dYᵀ·X) takes the pair micro-panels.
      if (!p.a_kmajor && !p.b_kmajor && p.b_dtype == DType::kBF16 &&
          (p.k >= kBcastMinK || p.n * p.k * 2 >= kBcastMinBBytes)) {
        RunBcastBf16(p);
      } else {
        RunPacked<Avx512Bf16Path>(p);
      }
      return;
    case PackedIsa::kAvx512:
      RunPacked<Avx512Path>(p);
      return;
    case PackedIsa::kAvx2:
      RunPacked<Avx2Path>(p);
      return;
    default:
      RunPacked<ScalarPath>(p);
  }
}

}  // namespace
}  // namespace cctune::cpu
