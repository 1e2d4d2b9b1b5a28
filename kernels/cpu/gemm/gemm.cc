#include "kernels/cpu/gemm/gemm.h"

// GCC 12's AVX-512 intrinsic headers trip a false -Wmaybe-uninitialized (GCC PR105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <cblas.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "kernels/cpu/gemm/amx_gemm.h"
#include "kernels/cpu/gemm/packed_gemm.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/simd_targets.h"
#include "kernels/cpu/thread_pool.h"

namespace cctune::cpu {

using gemm_internal::GemmIsa;

namespace {

// Above this many rows of A (or once A outgrows kMaxStreamABytes, re-read from the last-level
// cache for every 4 rows of B), GemmNT goes to OpenBLAS, converting 16-bit B to f32 panels;
// up to it the streaming kernel is faster. Measured on one Zen 4 core, 2048x2048 weights,
// GFLOP/s streaming vs OpenBLAS route: f32 m=16 61 vs 30, m=64 81 vs 63, m=128 79 vs 78,
// m=256 78 vs 88; bf16 m=64 97 vs 59, m=256 97 vs 83, m=512 96 vs 89.
constexpr int64_t kMaxStreamRowsF32 = 128;
// 16-bit B where neither AMX nor the full-rate bf16 dot takes it (AVX2, AVX-512 without BF16):
// from this many rows the packed f32-FMA GEMM (B converted while packed, read in place) instead
// of the streaming kernel. Measured (gemm_bench SmallM, 2048x2048 bf16 from DRAM, 2-core AVX2
// Zen 3 EPYC, 2026-12-03, GFLOP/s) m = 16 / 32 / 64 / 128 / 256: streaming 74.5 / 63.5 / 69.1 /
// 81.2 / 79.3, OpenBLAS route 37.3 / 65.9 / 70.2 / 80.2 / 112.5, packed 73.0 / 70.4 / 89.8 /
// 115.4 / 127.5; Prefill m = 512 on the 1.1B shapes: packed 133-164, OpenBLAS route 134-140.
constexpr int64_t kPackedMinRows16 = 32;
constexpr int64_t kMaxStreamABytes = 8 << 20;
// From this many rows of A, bf16-weight GemmNT takes the AMX GEMM when it may (AmxRouteEnabled).
// Measured (gemm_bench SmallM bf16_amx vs bf16_avx512, 2048x2048, loaded 2-core Sapphire
// Rapids): see benchmarks/README.md. With the weights coming from DRAM the streaming kernel is
// faster up to about 128 rows (m=16/32/64/128: AMX 38/90/97/188 GFLOP/s, streaming
// 143/167/196/194), so shorter prompts keep it (and exact f32 activations).
constexpr int64_t kAmxMinRows = 128;
// On a CPU whose bf16 dot product runs at the f32 FMA's instruction rate (Bf16DotRouteEnabled:
// twice the f32 peak), bf16-weight GemmNT takes the packed GEMM's vdpbf16ps kernel from this
// many rows on (at every m inside a ScopedBatchInvariantGemm); below, the streaming kernel's
// bf16 dot (kAvx512Bf16: decode). Both round A to bf16, as llama.cpp's bf16 path does. The
// streaming dot reads W with half the instructions of the f32 FMA tile (no bf16 -> f32
// conversion): anchor 1.1B bf16 decode, four alternating pairs of fresh processes, 2026-12-03,
// tokens/s f32 FMA / bf16 dot: 21.3 / 22.2, 19.2 / 20.7, 20.1 / 24.0, 26.2 / 31.9 (the gain
// grows with the machine's bandwidth of the moment). Measured (gemm_bench SmallM,
// 2048x2048 bf16 from DRAM, idle 2-core Zen 5 EPYC, GFLOP/s): m = 32 / 64 / 128 / 256 / 512:
// streaming f32-FMA 175 / 198 / 236 / 224 / 195, streaming bf16 dot 284 / 366 / 397 / 376 / 276,
// packed bf16 dot 229 / 396 / 483 / 470 / 463 (m = 1: 33.3 vs 32.6 GB/s, bf16 dot vs f32 FMA).
// Since the packed path reads W in place (2026-12-03; same bench, same machine, one run):
// m = 8 / 16 / 32 / 64 / 128: streaming f32-FMA 166 / 189 / 247 / 255 / 279, packed bf16 dot
// 169 / 242 / 669 / 697 / 819. So from 16 rows on.
constexpr int64_t kBf16DotMinRows = 16;
// Below this many multiply-adds a call runs on one thread (fork/join would dominate).
constexpr int64_t kMinParallelMacs = 1 << 15;
// Size of the f32 panel (per thread) a 16-bit B is converted into before OpenBLAS multiplies
// it; it stays in cache while sgemm reads it.
constexpr int64_t kPanelBytes = 4 << 20;

// One GemmNT call's arguments.
struct NtArgs {
  int64_t m, n, k;
  const float* a;
  int64_t lda;
  const void* b;
  DType b_dtype;
  int64_t ldb;
  float* c;
  int64_t ldc;
  float beta;
};

CCTUNE_INLINE void StoreC(float* c, float v, float beta) { *c = beta == 0.f ? v : v + beta * *c; }

CCTUNE_INLINE float ToF32(float x) { return x; }
CCTUNE_INLINE float ToF32(bf16 x) { return Bf16ToFloat(x); }
inline float ToF32(f16 x) { return F16ToFloat(x); }

// Scales C by beta (beta == 0: sets it to zero without reading it).
void ScaleC(int64_t m, int64_t n, float* c, int64_t ldc, float beta) {
  if (beta == 1.f) return;
  for (int64_t i = 0; i < m; ++i) {
    float* ci = c + i * ldc;
    if (beta == 0.f) {
      std::fill(ci, ci + n, 0.f);
    } else {
      for (int64_t j = 0; j < n; ++j) ci[j] *= beta;
    }
  }
}

// Splits [0, n) into `parts` nearly equal ranges whose boundaries are multiples of `align`.
void SplitRange(int64_t n, int parts, int index, int64_t align, int64_t* begin, int64_t* end) {
  const int64_t blocks = (n + align - 1) / align;
  const int64_t per = blocks / parts, extra = blocks % parts;
  const int64_t b0 = index * per + std::min<int64_t>(index, extra);
  const int64_t b1 = b0 + per + (index < extra ? 1 : 0);
  *begin = std::min(n, b0 * align);
  *end = std::min(n, b1 * align);
}

// ---------------------------------------------------------------------------------------------
// Scalar path: converts one B row to f32, then dots it with every row of A.

template <typename T>
void ScalarRange(const NtArgs& p, int64_t j0, int64_t j1, float* row) {
  const T* b = static_cast<const T*>(p.b);
  for (int64_t j = j0; j < j1; ++j) {
    const T* bj = b + j * p.ldb;
    for (int64_t q = 0; q < p.k; ++q) row[q] = ToF32(bj[q]);
    for (int64_t i = 0; i < p.m; ++i) {
      const float* ai = p.a + i * p.lda;
      float s[4] = {0.f, 0.f, 0.f, 0.f};
      int64_t q = 0;
      for (; q + 4 <= p.k; q += 4) {
        for (int u = 0; u < 4; ++u) s[u] += ai[q + u] * row[q + u];
      }
      for (; q < p.k; ++q) s[0] += ai[q] * row[q];
      StoreC(p.c + i * p.ldc + j, (s[0] + s[1]) + (s[2] + s[3]), p.beta);
    }
  }
}

void ScalarConvertRow(const void* src, DType t, int64_t k, float* dst) {
  switch (t) {
    case DType::kBF16:
      for (int64_t q = 0; q < k; ++q) dst[q] = ToF32(static_cast<const bf16*>(src)[q]);
      break;
    case DType::kF16:
      for (int64_t q = 0; q < k; ++q) dst[q] = ToF32(static_cast<const f16*>(src)[q]);
      break;
    default:
      std::memcpy(dst, src, k * sizeof(float));
  }
}

// ---------------------------------------------------------------------------------------------
// Streaming kernels. A tile multiplies MR rows of A with NR rows of B over all of k, with U
// k-steps unrolled into independent accumulators (FMA latency). Up to kSingleStreamRows rows
// of A use NR = 1: each thread then reads its B rows front to back as one sequential stream,
// which the hardware prefetcher serves best (measured: 8 interleaved row streams per thread
// lost ~15% of single-core DRAM bandwidth). More rows of A use NR = 4: with NR = 1 every B
// row would re-read all of A from L2, which caps m = 4 at a quarter of the FMA rate.
constexpr int64_t kSingleStreamRows = 2;
// Work split of the streaming kernels (StreamGemmNT).
constexpr int64_t kStreamChunkRows = 32;
constexpr int kStreamChunksPerThread = 8;
// Rows of A longer than this many floats do not share L1 (32 KiB) with a row of B.
constexpr int64_t kL1Floats = 4096;
// B rows of at most this many bytes (small models: stories260K's k = 64) are read 4 at a time
// even for m = 1: 4 rows then lie in one 4 KiB page (still one stream for the prefetcher), and
// one combined horizontal sum for 4 outputs replaces 4 separate ones, which at such short
// rows cost more than the multiply-adds.
constexpr int64_t kShortRowBytes = 1024;

// 16-bit B (bf16, f16) is prefetched this many bytes ahead of the streaming kernels' loads,
// one line per 64 bytes read (the next rows' lines once a row's end is near: B rows are
// usually contiguous, and a prefetch past B does not fault). The hardware prefetcher stops at
// each 4 KiB page, which for k = 2048 bf16 is each row. Measured (a GEMV over 8 x [8192, 2048]
// bf16, m = 1, 2 threads, Zen 5, medians of 7 alternating passes in one process): 4 KiB pages
// 37.9 -> 50.1 GB/s, huge pages 51.9 -> 64.3 (8 KiB ahead: within noise of 4; T1/NTA hints
// lower; f32 B: no gain). On the AVX2-only Zen 3 (2 threads, 1.1B bf16 decode, three rounds of
// fresh processes alternating, 2026-12-03, tokens/s) 4 KiB ahead was the slowest: 0 bytes 10.4 /
// 11.4 / 10.3, 512 10.9 / 11.1 / 9.9, 1 KiB 11.8 / 12.5 / 10.8, 2 KiB 10.1 / 9.2 / 10.2,
// 4 KiB 10.1 / 9.2 / 11.0 (and the GEMV bench, 8 x [8192, 2048]: no prefetch 12-19% ahead of
// 4 KiB). So 4 KiB where AVX-512 runs, 1 KiB elsewhere (only Zen 3 measured).
// CCTUNE_STREAM_PREFETCH_BYTES overrides it (0 turns it off); SetStreamPrefetchBytes too
// (benchmarks). Each tile reads it once (StreamPrefetchBytes) and passes it to PrefetchB.
int64_t DefaultStreamPrefetchBytes() {
  if (const char* env = std::getenv("CCTUNE_STREAM_PREFETCH_BYTES")) {
    char* end = nullptr;
    const long long v = std::strtoll(env, &end, 10);
    CCTUNE_CHECK(end != env && *end == '\0' && v >= 0 && v <= (1 << 20),
                 "CCTUNE_STREAM_PREFETCH_BYTES must be an integer in [0, 1048576], got '", env,
                 "'");
    return v;
  }
  return IsaSupported(IsaLevel::kAvx512) ? 4096 : 1024;
}
std::atomic<int64_t> g_stream_prefetch_bytes{DefaultStreamPrefetchBytes()};

CCTUNE_INLINE int64_t StreamPrefetchBytes() {
  return g_stream_prefetch_bytes.load(std::memory_order_relaxed);
}

CCTUNE_INLINE void PrefetchB(const void* p, int64_t ahead) {
  if (ahead > 0) _mm_prefetch(static_cast<const char*>(p) + ahead, _MM_HINT_T0);
}

CCTUNE_INLINE bool ShortRows(int64_t k, int64_t elem_bytes) {
  return k * elem_bytes <= kShortRowBytes;
}

// AVX2 path: 8 lanes; k % 8 tail handled in scalar code.

CCTUNE_TARGET_AVX2 CCTUNE_INLINE __m256 Avx2Load8(const float* p) { return _mm256_loadu_ps(p); }
CCTUNE_TARGET_AVX2 CCTUNE_INLINE __m256 Avx2Load8(const bf16* p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
CCTUNE_TARGET_AVX2 CCTUNE_INLINE __m256 Avx2Load8(const f16* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

CCTUNE_TARGET_AVX2 CCTUNE_INLINE float Avx2Sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The sums of 4 vectors, as one vector [sum a, sum b, sum c, sum d].
CCTUNE_TARGET_AVX2 CCTUNE_INLINE __m128 Avx2Reduce4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

// c[0..3] = v (+ beta * c).
CCTUNE_TARGET_AVX2 CCTUNE_INLINE void StoreC4(float* c, __m128 v, float beta) {
  if (beta != 0.f) v = _mm_add_ps(v, _mm_mul_ps(_mm_set1_ps(beta), _mm_loadu_ps(c)));
  _mm_storeu_ps(c, v);
}

template <typename T, int MR, int NR, int U>
CCTUNE_TARGET_AVX2 void Avx2Tile(int64_t k, const float* a, int64_t lda, const T* b, int64_t ldb,
                                 float* c, int64_t ldc, float beta) {
  __m256 acc[U][MR][NR];
#pragma GCC unroll 4
  for (int u = 0; u < U; ++u) {
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) acc[u][i][j] = _mm256_setzero_ps();
    }
  }
  const int64_t ahead = sizeof(T) == 2 ? StreamPrefetchBytes() : 0;
  int64_t q = 0;
  for (; q + 8 * U <= k; q += 8 * U) {
    if constexpr (sizeof(T) == 2) {
#pragma GCC unroll 4
      for (int u = 0; u < U; ++u) {
        if (((q + 8 * u) & 31) != 0) continue;  // one prefetch per line (32 16-bit elements)
#pragma GCC unroll 4
        for (int j = 0; j < NR; ++j) PrefetchB(b + j * ldb + q + 8 * u, ahead);
      }
    }
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) {
      __m256 bv[NR];
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) {
        bv[j] = Avx2Load8(b + j * ldb + q + 8 * u);
        if (MR > 1) CCTUNE_IN_REGISTER(bv[j]);
      }
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        __m256 av = _mm256_loadu_ps(a + i * lda + q + 8 * u);
        if (NR > 1) CCTUNE_IN_REGISTER(av);
#pragma GCC unroll 4
        for (int j = 0; j < NR; ++j) acc[u][i][j] = _mm256_fmadd_ps(av, bv[j], acc[u][i][j]);
      }
    }
  }
  for (; q + 8 <= k; q += 8) {
    __m256 bv[NR];
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) bv[j] = Avx2Load8(b + j * ldb + q);
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      const __m256 av = _mm256_loadu_ps(a + i * lda + q);
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) acc[0][i][j] = _mm256_fmadd_ps(av, bv[j], acc[0][i][j]);
    }
  }
  __m256 sum[MR][NR];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      sum[i][j] = acc[0][i][j];
#pragma GCC unroll 4
      for (int u = 1; u < U; ++u) sum[i][j] = _mm256_add_ps(sum[i][j], acc[u][i][j]);
    }
  }
  if constexpr (NR == 4) {
    if (q == k) {  // no scalar tail: one combined horizontal sum per row of A
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        StoreC4(c + i * ldc, Avx2Reduce4(sum[i][0], sum[i][1], sum[i][2], sum[i][3]), beta);
      }
      return;
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      float s = Avx2Sum(sum[i][j]);
      for (int64_t t = q; t < k; ++t) s += a[i * lda + t] * ToF32(b[j * ldb + t]);
      StoreC(c + i * ldc + j, s, beta);
    }
  }
}

template <typename T>
CCTUNE_TARGET_AVX2 void Avx2Range(const NtArgs& p, int64_t j0, int64_t j1) {
  const T* b = static_cast<const T*>(p.b);
  if (p.m <= 2) {
    int64_t j = j0;
    if (p.m == 1 && ShortRows(p.k, sizeof(T))) {
      for (; j + 4 <= j1; j += 4) {
        Avx2Tile<T, 1, 4, 1>(p.k, p.a, p.lda, b + j * p.ldb, p.ldb, p.c + j, p.ldc, p.beta);
      }
    }
    for (; j < j1; ++j) {
      if (p.m == 1) {
        Avx2Tile<T, 1, 1, 4>(p.k, p.a, p.lda, b + j * p.ldb, p.ldb, p.c + j, p.ldc, p.beta);
      } else {
        Avx2Tile<T, 2, 1, 2>(p.k, p.a, p.lda, b + j * p.ldb, p.ldb, p.c + j, p.ldc, p.beta);
      }
    }
    return;
  }
  int64_t j = j0;
  for (; j + 4 <= j1; j += 4) {
    int64_t i = 0;
    for (; i + 2 <= p.m; i += 2) {
      Avx2Tile<T, 2, 4, 1>(p.k, p.a + i * p.lda, p.lda, b + j * p.ldb, p.ldb, p.c + i * p.ldc + j,
                           p.ldc, p.beta);
    }
    if (i < p.m) {
      Avx2Tile<T, 1, 4, 1>(p.k, p.a + i * p.lda, p.lda, b + j * p.ldb, p.ldb, p.c + i * p.ldc + j,
                           p.ldc, p.beta);
    }
  }
  for (; j < j1; ++j) {
    for (int64_t i = 0; i < p.m; ++i) {
      Avx2Tile<T, 1, 1, 4>(p.k, p.a + i * p.lda, p.lda, b + j * p.ldb, p.ldb, p.c + i * p.ldc + j,
                           p.ldc, p.beta);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// AVX-512 path: 16 lanes; the k tail uses masked loads (no fault past the end of a row).

CCTUNE_TARGET_AVX512 CCTUNE_INLINE __m512 Avx512Load16(const float* p) {
  return _mm512_loadu_ps(p);
}
CCTUNE_TARGET_AVX512 CCTUNE_INLINE __m512 Avx512Load16(const bf16* p) {
  const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
CCTUNE_TARGET_AVX512 CCTUNE_INLINE __m512 Avx512Load16(const f16* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
CCTUNE_TARGET_AVX512 CCTUNE_INLINE __m512 Avx512Load16(const float* p, __mmask16 mk) {
  return _mm512_maskz_loadu_ps(mk, p);
}
CCTUNE_TARGET_AVX512 CCTUNE_INLINE __m512 Avx512Load16(const bf16* p, __mmask16 mk) {
  const __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mk, p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
CCTUNE_TARGET_AVX512 CCTUNE_INLINE __m512 Avx512Load16(const f16* p, __mmask16 mk) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk, p));
}

CCTUNE_TARGET_AVX512 CCTUNE_INLINE __m128 Avx512Reduce4(__m512 a, __m512 b, __m512 c, __m512 d) {
  auto half = [](__m512 v) CCTUNE_TARGET_AVX512 {
    return _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  };
  return Avx2Reduce4(half(a), half(b), half(c), half(d));
}

// C = the sums over u of acc[u] (each reduced horizontally) + beta * C.
template <int MR, int NR, int U>
CCTUNE_TARGET_AVX512 CCTUNE_INLINE void Avx512Finish(const __m512 (&acc)[U][MR][NR], float* c,
                                                    int64_t ldc, float beta) {
  __m512 sum[MR][NR];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      sum[i][j] = acc[0][i][j];
#pragma GCC unroll 8
      for (int u = 1; u < U; ++u) sum[i][j] = _mm512_add_ps(sum[i][j], acc[u][i][j]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
    if constexpr (NR == 4) {
      StoreC4(c + i * ldc, Avx512Reduce4(sum[i][0], sum[i][1], sum[i][2], sum[i][3]), beta);
    } else {
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) StoreC(c + i * ldc + j, _mm512_reduce_add_ps(sum[i][j]), beta);
    }
  }
}

// f32 and f16 B.
template <typename T, int MR, int NR, int U>
CCTUNE_TARGET_AVX512 void Avx512Tile(int64_t k, const float* a, int64_t lda, const T* b,
                                     int64_t ldb, float* c, int64_t ldc, float beta) {
  __m512 acc[U][MR][NR];
#pragma GCC unroll 4
  for (int u = 0; u < U; ++u) {
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) acc[u][i][j] = _mm512_setzero_ps();
    }
  }
  int64_t q = 0;
  for (; q + 16 * U <= k; q += 16 * U) {
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) {
      __m512 bv[NR];
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) {
        bv[j] = Avx512Load16(b + j * ldb + q + 16 * u);
        if (MR > 1) CCTUNE_IN_REGISTER(bv[j]);
      }
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        __m512 av = _mm512_loadu_ps(a + i * lda + q + 16 * u);
        if (NR > 1) CCTUNE_IN_REGISTER(av);
#pragma GCC unroll 4
        for (int j = 0; j < NR; ++j) acc[u][i][j] = _mm512_fmadd_ps(av, bv[j], acc[u][i][j]);
      }
    }
  }
  for (; q < k; q += 16) {
    const __mmask16 mk =
        k - q >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (k - q)) - 1u);
    __m512 bv[NR];
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) bv[j] = Avx512Load16(b + j * ldb + q, mk);
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      const __m512 av = _mm512_maskz_loadu_ps(mk, a + i * lda + q);
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) acc[0][i][j] = _mm512_fmadd_ps(av, bv[j], acc[0][i][j]);
    }
  }
  Avx512Finish<MR, NR, U>(acc, c, ldc, beta);
}

// bf16 B without a shuffle: 32 bf16 loaded as 16 u32 pairs convert to f32 with one shift (the
// even elements) and one mask (the odd ones). A comes pre-permuted (PermuteEvenOdd) so that
// each 32-block holds its 16 even elements, then its 16 odd ones, zero-padded to a multiple
// of 32. S = 2 keeps separate even/odd accumulators (more independent FMA chains).
template <int MR, int NR, int U, int S>
CCTUNE_TARGET_AVX512 void Avx512Bf16Tile(int64_t k, const float* ap, int64_t ldap, const bf16* b,
                                         int64_t ldb, float* c, int64_t ldc, float beta) {
  __m512 acc[U * S][MR][NR];
#pragma GCC unroll 8
  for (int u = 0; u < U * S; ++u) {
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) acc[u][i][j] = _mm512_setzero_ps();
    }
  }
  const __m512i hi = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  const int64_t ahead = StreamPrefetchBytes();
  int64_t q = 0;
  for (; q + 32 * U <= k; q += 32 * U) {
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) {
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) PrefetchB(b + j * ldb + q + 32 * u, ahead);
    }
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) {
      __m512 be[NR], bo[NR];
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) {
        __m512i v = _mm512_loadu_si512(b + j * ldb + q + 32 * u);
        CCTUNE_IN_REGISTER(v);
        be[j] = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
        bo[j] = _mm512_castsi512_ps(_mm512_and_si512(v, hi));
      }
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        __m512 ae = _mm512_loadu_ps(ap + i * ldap + q + 32 * u);
        __m512 ao = _mm512_loadu_ps(ap + i * ldap + q + 32 * u + 16);
        if (NR > 1) {
          CCTUNE_IN_REGISTER(ae);
          CCTUNE_IN_REGISTER(ao);
        }
#pragma GCC unroll 4
        for (int j = 0; j < NR; ++j) {
          acc[u * S][i][j] = _mm512_fmadd_ps(ae, be[j], acc[u * S][i][j]);
          acc[u * S + S - 1][i][j] = _mm512_fmadd_ps(ao, bo[j], acc[u * S + S - 1][i][j]);
        }
      }
    }
  }
  for (; q < k; q += 32) {
    const __mmask32 mk = k - q >= 32 ? static_cast<__mmask32>(0xffffffffu)
                                     : static_cast<__mmask32>((1u << (k - q)) - 1u);
    __m512 be[NR], bo[NR];
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      const __m512i v = _mm512_maskz_loadu_epi16(mk, b + j * ldb + q);
      be[j] = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
      bo[j] = _mm512_castsi512_ps(_mm512_and_si512(v, hi));
    }
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      const __m512 ae = _mm512_loadu_ps(ap + i * ldap + q);
      const __m512 ao = _mm512_loadu_ps(ap + i * ldap + q + 16);
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) {
        acc[0][i][j] = _mm512_fmadd_ps(ae, be[j], acc[0][i][j]);
        acc[S - 1][i][j] = _mm512_fmadd_ps(ao, bo[j], acc[S - 1][i][j]);
      }
    }
  }
  Avx512Finish<MR, NR, U * S>(acc, c, ldc, beta);
}

// A [m, k] -> ap [m, kp] (kp = k rounded up to 32): per 32-block, even elements then odd ones.
void PermuteEvenOdd(int64_t m, int64_t k, const float* a, int64_t lda, float* ap, int64_t kp) {
  for (int64_t i = 0; i < m; ++i) {
    const float* ai = a + i * lda;
    float* out = ap + i * kp;
    for (int64_t q0 = 0; q0 < kp; q0 += 32) {
      for (int t = 0; t < 16; ++t) {
        const int64_t e = q0 + 2 * t, o = e + 1;
        out[q0 + t] = e < k ? ai[e] : 0.f;
        out[q0 + 16 + t] = o < k ? ai[o] : 0.f;
      }
    }
  }
}

// Rows [j0, j1) of B against all rows of A. T = bf16 reads the permuted A (ap, stride ldap).
template <typename T>
CCTUNE_TARGET_AVX512 void Avx512Range(const NtArgs& p, const float* ap, int64_t ldap, int64_t j0,
                                      int64_t j1) {
  const T* b = static_cast<const T*>(p.b);
  constexpr bool kBf16 = std::is_same_v<T, bf16>;
  const float* a = kBf16 ? ap : p.a;
  const int64_t lda = kBf16 ? ldap : p.lda;
  if (p.m <= kSingleStreamRows) {
    int64_t j = j0;
    if (p.m == 1 && ShortRows(p.k, sizeof(T))) {
      for (; j + 4 <= j1; j += 4) {
        const T* bj = b + j * p.ldb;
        if constexpr (kBf16) {
          Avx512Bf16Tile<1, 4, 1, 2>(p.k, a, lda, bj, p.ldb, p.c + j, p.ldc, p.beta);
        } else {
          Avx512Tile<T, 1, 4, 1>(p.k, a, lda, bj, p.ldb, p.c + j, p.ldc, p.beta);
        }
      }
    }
    if (p.m == 1 && p.k > kL1Floats) {
      // A row too big to share L1 with a row of B: two B rows per pass halve the A reloads
      // from L2 (measured +15-20% on 2048x8192 bf16 weights, one core).
      for (; j + 2 <= j1; j += 2) {
        const T* bj = b + j * p.ldb;
        if constexpr (kBf16) {
          Avx512Bf16Tile<1, 2, 1, 2>(p.k, a, lda, bj, p.ldb, p.c + j, p.ldc, p.beta);
        } else {
          Avx512Tile<T, 1, 2, 2>(p.k, a, lda, bj, p.ldb, p.c + j, p.ldc, p.beta);
        }
      }
    }
    for (; j < j1; ++j) {
      const T* bj = b + j * p.ldb;
      float* cj = p.c + j;
      if constexpr (kBf16) {
        switch (p.m) {
          case 1:
            Avx512Bf16Tile<1, 1, 2, 2>(p.k, a, lda, bj, p.ldb, cj, p.ldc, p.beta);
            break;
          default:
            Avx512Bf16Tile<2, 1, 1, 2>(p.k, a, lda, bj, p.ldb, cj, p.ldc, p.beta);
        }
      } else {
        switch (p.m) {
          case 1:
            Avx512Tile<T, 1, 1, 4>(p.k, a, lda, bj, p.ldb, cj, p.ldc, p.beta);
            break;
          default:
            Avx512Tile<T, 2, 1, 2>(p.k, a, lda, bj, p.ldb, cj, p.ldc, p.beta);
        }
      }
    }
    return;
  }
  // More rows: tiles of 4 B rows x up to 4 A rows (each B vector feeds MR FMAs and each A
  // vector NR), then single leftover B rows.
  int64_t j = j0;
  for (; j + 4 <= j1; j += 4) {
    const T* bj = b + j * p.ldb;
    for (int64_t i = 0; i < p.m; i += 4) {
      const float* ai = a + i * lda;
      float* c = p.c + i * p.ldc + j;
      switch (std::min<int64_t>(4, p.m - i)) {
        case 1:
          if constexpr (kBf16) {
            Avx512Bf16Tile<1, 4, 1, 2>(p.k, ai, lda, bj, p.ldb, c, p.ldc, p.beta);
          } else {
            Avx512Tile<T, 1, 4, 1>(p.k, ai, lda, bj, p.ldb, c, p.ldc, p.beta);
          }
          break;
        case 2:
          if constexpr (kBf16) {
            Avx512Bf16Tile<2, 4, 1, 1>(p.k, ai, lda, bj, p.ldb, c, p.ldc, p.beta);
          } else {
            Avx512Tile<T, 2, 4, 1>(p.k, ai, lda, bj, p.ldb, c, p.ldc, p.beta);
          }
          break;
        case 3:
          if constexpr (kBf16) {
            Avx512Bf16Tile<3, 4, 1, 1>(p.k, ai, lda, bj, p.ldb, c, p.ldc, p.beta);
          } else {
            Avx512Tile<T, 3, 4, 1>(p.k, ai, lda, bj, p.ldb, c, p.ldc, p.beta);
          }
          break;
        default:
          if constexpr (kBf16) {
            Avx512Bf16Tile<4, 4, 1, 1>(p.k, ai, lda, bj, p.ldb, c, p.ldc, p.beta);
          } else {
            Avx512Tile<T, 4, 4, 1>(p.k, ai, lda, bj, p.ldb, c, p.ldc, p.beta);
          }
      }
    }
  }
  for (; j < j1; ++j) {
    const T* bj = b + j * p.ldb;
    for (int64_t i = 0; i < p.m; ++i) {
      float* c = p.c + i * p.ldc + j;
      if constexpr (kBf16) {
        Avx512Bf16Tile<1, 1, 2, 2>(p.k, a + i * lda, lda, bj, p.ldb, c, p.ldc, p.beta);
      } else {
        Avx512Tile<T, 1, 1, 4>(p.k, a + i * lda, lda, bj, p.ldb, c, p.ldc, p.beta);
      }
    }
  }
}

CCTUNE_TARGET_AVX512 void Avx512ConvertRow(const void* src, DType t, int64_t k, float* dst) {
  int64_t q = 0;
  if (t == DType::kBF16) {
    const bf16* s = static_cast<const bf16*>(src);
    for (; q + 16 <= k; q += 16) _mm512_storeu_ps(dst + q, Avx512Load16(s + q));
    if (q < k) {
      const __mmask16 mk = static_cast<__mmask16>((1u << (k - q)) - 1u);
      _mm512_mask_storeu_ps(dst + q, mk, Avx512Load16(s + q, mk));
    }
  } else if (t == DType::kF16) {
    const f16* s = static_cast<const f16*>(src);
    for (; q + 16 <= k; q += 16) _mm512_storeu_ps(dst + q, Avx512Load16(s + q));
    if (q < k) {
      const __mmask16 mk = static_cast<__mmask16>((1u << (k - q)) - 1u);
      _mm512_mask_storeu_ps(dst + q, mk, Avx512Load16(s + q, mk));
    }
  } else {
    std::memcpy(dst, src, k * sizeof(float));
  }
}

// ---------------------------------------------------------------------------------------------
// AVX512_BF16 path (bf16 B only): A pre-rounded to bf16, 32 products per _mm512_dpbf16_ps.

template <int MR, int NR, int U>
CCTUNE_TARGET_AVX512BF16 void Bf16DotTile(int64_t k, const bf16* a, int64_t lda, const bf16* b,
                                          int64_t ldb, float* c, int64_t ldc, float beta) {
  __m512 acc[U][MR][NR];
#pragma GCC unroll 4
  for (int u = 0; u < U; ++u) {
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) acc[u][i][j] = _mm512_setzero_ps();
    }
  }
  const int64_t ahead = StreamPrefetchBytes();
  int64_t q = 0;
  for (; q + 32 * U <= k; q += 32 * U) {
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) {
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) PrefetchB(b + j * ldb + q + 32 * u, ahead);
    }
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) {
      __m512bh bv[NR];
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) {
        bv[j] = (__m512bh)_mm512_loadu_si512(b + j * ldb + q + 32 * u);
        if (MR > 1) CCTUNE_IN_REGISTER(bv[j]);
      }
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        __m512bh av = (__m512bh)_mm512_loadu_si512(a + i * lda + q + 32 * u);
        if (NR > 1) CCTUNE_IN_REGISTER(av);
#pragma GCC unroll 4
        for (int j = 0; j < NR; ++j) acc[u][i][j] = _mm512_dpbf16_ps(acc[u][i][j], av, bv[j]);
      }
    }
  }
  for (; q < k; q += 32) {
    const __mmask32 mk = k - q >= 32 ? static_cast<__mmask32>(0xffffffffu)
                                     : static_cast<__mmask32>((1u << (k - q)) - 1u);
    __m512bh bv[NR];
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) bv[j] = (__m512bh)_mm512_maskz_loadu_epi16(mk, b + j * ldb + q);
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      const __m512bh av = (__m512bh)_mm512_maskz_loadu_epi16(mk, a + i * lda + q);
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) acc[0][i][j] = _mm512_dpbf16_ps(acc[0][i][j], av, bv[j]);
    }
  }
  Avx512Finish<MR, NR, U>(acc, c, ldc, beta);
}

// `a16` is A rounded to bf16, [m, k] contiguous.
CCTUNE_TARGET_AVX512BF16 void Bf16DotRange(const NtArgs& p, const bf16* a16, int64_t j0,
                                           int64_t j1) {
  const bf16* b = static_cast<const bf16*>(p.b);
  const int64_t lda = p.k;
  if (p.m <= kSingleStreamRows) {
    for (int64_t j = j0; j < j1; ++j) {
      const bf16* bj = b + j * p.ldb;
      float* cj = p.c + j;
      switch (p.m) {
        case 1:
          Bf16DotTile<1, 1, 4>(p.k, a16, lda, bj, p.ldb, cj, p.ldc, p.beta);
          break;
        default:
          Bf16DotTile<2, 1, 2>(p.k, a16, lda, bj, p.ldb, cj, p.ldc, p.beta);
      }
    }
    return;
  }
  int64_t j = j0;
  for (; j + 4 <= j1; j += 4) {
    const bf16* bj = b + j * p.ldb;
    int64_t i = 0;
    for (; i + 4 <= p.m; i += 4) {
      Bf16DotTile<4, 4, 1>(p.k, a16 + i * lda, lda, bj, p.ldb, p.c + i * p.ldc + j, p.ldc, p.beta);
    }
    for (; i < p.m; ++i) {
      Bf16DotTile<1, 4, 1>(p.k, a16 + i * lda, lda, bj, p.ldb, p.c + i * p.ldc + j, p.ldc, p.beta);
    }
  }
  for (; j < j1; ++j) {
    for (int64_t i = 0; i < p.m; ++i) {
      Bf16DotTile<1, 1, 4>(p.k, a16 + i * lda, lda, b + j * p.ldb, p.ldb, p.c + i * p.ldc + j,
                           p.ldc, p.beta);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Drivers.

// Run-time levels come from kernels/cpu/isa (CCTUNE_CPU_ISA can lower them).
bool CpuHasAvx2() { return IsaSupported(IsaLevel::kAvx2); }
bool CpuHasAvx512() { return IsaSupported(IsaLevel::kAvx512); }
bool CpuHasAvx512Bf16() { return IsaSupported(IsaLevel::kAvx512Bf16); }

// Per-call scratch: A rounded to bf16 (kAvx512Bf16) or permuted even/odd (kAvx512, bf16 B).
struct StreamScratch {
  std::vector<bf16> a16;
  std::vector<float> ap;
  int64_t ldap = 0;
};

template <typename T>
void RunRange(GemmIsa isa, const NtArgs& p, const StreamScratch& s, int64_t j0, int64_t j1,
              std::vector<float>& row) {
  switch (isa) {
    case GemmIsa::kAvx512Bf16:
      if constexpr (std::is_same_v<T, bf16>) {
        Bf16DotRange(p, s.a16.data(), j0, j1);
        return;
      }
      Avx512Range<T>(p, s.ap.data(), s.ldap, j0, j1);
      return;
    case GemmIsa::kAvx512:
      Avx512Range<T>(p, s.ap.data(), s.ldap, j0, j1);
      return;
    case GemmIsa::kAvx2:
      Avx2Range<T>(p, j0, j1);
      return;
    default:
      row.resize(p.k);
      ScalarRange<T>(p, j0, j1, row.data());
      return;
  }
}

// The streaming kernel: threads split n (in multiples of 8 rows of B); each reads its B rows
// once and multiplies them with every row of A.
void StreamGemmNT(GemmIsa isa, const NtArgs& p) {
  thread_local StreamScratch scratch;
  if (p.b_dtype == DType::kBF16) {
    if (isa == GemmIsa::kAvx512Bf16) {
      scratch.a16.resize(p.m * p.k);
      for (int64_t i = 0; i < p.m; ++i) {
        for (int64_t q = 0; q < p.k; ++q) {
          scratch.a16[i * p.k + q] = FloatToBf16(p.a[i * p.lda + q]);
        }
      }
    } else if (isa == GemmIsa::kAvx512) {
      scratch.ldap = (p.k + 31) / 32 * 32;
      scratch.ap.resize(p.m * scratch.ldap);
      PermuteEvenOdd(p.m, p.k, p.a, p.lda, scratch.ap.data(), scratch.ldap);
    }
  }
  const StreamScratch& s = scratch;
  auto range = [&](int task, int num_tasks) {
    int64_t j0, j1;
    SplitRange(p.n, num_tasks, task, 8, &j0, &j1);
    if (j0 >= j1) return;
    std::vector<float> row;  // scalar path only
    switch (p.b_dtype) {
      case DType::kBF16:
        RunRange<bf16>(isa, p, s, j0, j1, row);
        break;
      case DType::kF16:
        RunRange<f16>(isa, p, s, j0, j1, row);
        break;
      default:
        RunRange<float>(isa, p, s, j0, j1, row);
        break;
    }
  };
  // The persistent pool, not an OpenMP region: decode runs hundreds of these per token, and
  // OpenMP's end-of-region barrier spun for 12% of decode time (kernels/cpu/thread_pool.h).
  ThreadPool& pool = ThreadPool::Default();
  const bool parallel = p.m * p.n * p.k >= kMinParallelMacs && p.n >= 16;
  if (parallel && pool.num_threads() > 1) {
    // Up to kStreamChunksPerThread pieces per thread of at least kStreamChunkRows rows, handed
    // out as threads free up: the fixed halves left one thread waiting for the other at the
    // end of each GEMV (perf: ~5% of decode in the pool's wait on a shared 2-core VM).
    const int nt = pool.num_threads();
    const int64_t chunks = std::clamp<int64_t>(p.n / kStreamChunkRows, nt,
                                               int64_t{kStreamChunksPerThread} * nt);
    pool.RunDynamic(static_cast<int>(chunks), range);
  } else {
    range(0, 1);
  }
}

int ToBlasInt(int64_t v, const char* what) {
  CCTUNE_CHECK(v >= 0 && v <= INT_MAX, "gemm: ", what, " (", v, ") does not fit OpenBLAS's int");
  return static_cast<int>(v);
}

// Leading dimension for BLAS: >= the row length (a single row may carry any stride).
int BlasLd(int64_t ld, int64_t row_len, int64_t rows, const char* what) {
  CCTUNE_CHECK(ld >= row_len || rows <= 1, "gemm: ", what, " (", ld, ") < row length (", row_len,
               ")");
  return ToBlasInt(std::max<int64_t>({ld, row_len, 1}), what);
}

// This library owns the threading: OpenBLAS runs single-threaded inside OpenMP threads that
// each take a block of C. Letting OpenBLAS's pthreads and OpenMP's threads alternate makes each
// pool busy-wait while the other works, which on a small machine halves or worse the speed of
// whatever comes next (measured: a bf16 GEMV after an OpenBLAS call ran at 1/3 of bandwidth).
void UseSingleThreadedBlas() {
  static const bool done = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)done;
}

// A grid of pm x pn blocks over C [m, n] for nt threads, as square as the shape allows.
void BlockGrid(int64_t m, int64_t n, int nt, int* pm, int* pn) {
  *pm = 1;
  *pn = nt;
  double best = -1;
  for (int r = 1; r <= nt; ++r) {
    if (nt % r != 0) continue;
    const int cn = nt / r;
    if (r > m || cn > n) continue;
    // Elements of A and B each block reads: smaller means less redundant packing.
    const double cost =
        static_cast<double>((m + r - 1) / r) + static_cast<double>((n + cn - 1) / cn);
    if (best < 0 || cost < best) {
      best = cost;
      *pm = r;
      *pn = cn;
    }
  }
}

// Runs fn(i0, i1, j0, j1) for this thread's block of C [m, n] (rows aligned to 4, columns
// to 16); threads without a block do nothing.
template <typename Fn>
void ForThreadBlock(int64_t m, int64_t n, Fn fn) {
  const int nt = omp_get_num_threads(), tid = omp_get_thread_num();
  int pm, pn;
  BlockGrid(m, n, nt, &pm, &pn);
  if (tid >= pm * pn) return;
  int64_t i0, i1, j0, j1;
  SplitRange(m, pm, tid / pn, 4, &i0, &i1);
  SplitRange(n, pn, tid % pn, 16, &j0, &j1);
  if (i0 < i1 && j0 < j1) fn(i0, i1, j0, j1);
}

// OpenBLAS route: f32 B directly; 16-bit B converted, per thread, into f32 panels of its rows.
void BlasGemmNT(const NtArgs& p) {
  UseSingleThreadedBlas();
  const int64_t elem = static_cast<int64_t>(DTypeSize(p.b_dtype));
  const int lda = BlasLd(p.lda, p.k, p.m, "lda"), ldc = BlasLd(p.ldc, p.n, p.m, "ldc");
  const int k = ToBlasInt(p.k, "k");
  ToBlasInt(p.m, "m");
  ToBlasInt(p.n, "n");
  const bool avx512 = CpuHasAvx512();
  // Panels big enough that OpenBLAS's repacking of A per call stays cheap.
  const int64_t panel_rows = std::max<int64_t>(256, kPanelBytes / (4 * p.k));
  const bool parallel = p.m * p.n * p.k >= kMinParallelMacs;
#pragma omp parallel if (parallel)
  ForThreadBlock(p.m, p.n, [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    const int mb = static_cast<int>(i1 - i0);
    const float* a = p.a + i0 * p.lda;
    float* c = p.c + i0 * p.ldc;
    if (p.b_dtype == DType::kF32) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, mb, static_cast<int>(j1 - j0), k, 1.f, a,
                  lda, static_cast<const float*>(p.b) + j0 * p.ldb, BlasLd(p.ldb, p.k, p.n, "ldb"),
                  p.beta, c + j0, ldc);
      return;
    }
    thread_local std::vector<float> panel;
    const int64_t rows_max = std::min(panel_rows, j1 - j0);
    if (panel.size() < static_cast<size_t>(rows_max * p.k)) panel.resize(rows_max * p.k);
    for (int64_t jp = j0; jp < j1; jp += rows_max) {
      const int64_t rows = std::min(rows_max, j1 - jp);
      for (int64_t r = 0; r < rows; ++r) {
        const void* src = static_cast<const char*>(p.b) + (jp + r) * p.ldb * elem;
        if (avx512) {
          Avx512ConvertRow(src, p.b_dtype, p.k, panel.data() + r * p.k);
        } else {
          ScalarConvertRow(src, p.b_dtype, p.k, panel.data() + r * p.k);
        }
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, mb, static_cast<int>(rows), k, 1.f, a,
                  lda, panel.data(), k, p.beta, c + jp, ldc);
    }
  });
}

void BlasSgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
               int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, float beta) {
  UseSingleThreadedBlas();
  // Row-major op(A) [m, k]: stored [m, k] (row length k, m rows) or [k, m] (row length m).
  const int ilda = trans_a ? BlasLd(lda, m, k, "lda") : BlasLd(lda, k, m, "lda");
  const int ildb = trans_b ? BlasLd(ldb, k, n, "ldb") : BlasLd(ldb, n, k, "ldb");
  const int ildc = BlasLd(ldc, n, m, "ldc");
  const int ik = ToBlasInt(k, "k");
  ToBlasInt(m, "m");
  ToBlasInt(n, "n");
  const bool parallel = m * n * k >= kMinParallelMacs;
#pragma omp parallel if (parallel)
  ForThreadBlock(m, n, [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    const float* ab = trans_a ? a + i0 : a + i0 * lda;
    const float* bb = trans_b ? b + j0 * ldb : b + j0;
    float* cb = c + i0 * ldc + j0;
    if (i1 - i0 == 1) {
      // GEMV: c[j0:j1] = op(B)[:, j0:j1]ᵀ · a. sgemv's beta = 0 may still read y (0·NaN).
      if (beta == 0.f) std::fill(cb, cb + (j1 - j0), 0.f);
      const int inca = trans_a ? ilda : 1;
      if (trans_b) {
        cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(j1 - j0), ik, 1.f, bb, ildb, ab,
                    inca, beta, cb, 1);
      } else {
        cblas_sgemv(CblasRowMajor, CblasTrans, ik, static_cast<int>(j1 - j0), 1.f, bb, ildb, ab,
                    inca, beta, cb, 1);
      }
      return;
    }
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(i1 - i0),
                static_cast<int>(j1 - j0), ik, 1.f, ab, ilda, bb, ildb, beta, cb, ildc);
  });
}

std::atomic<int> g_batch_invariant{0};
std::atomic<int> g_exact{0};

}  // namespace

bool BatchInvariantGemm() { return g_batch_invariant.load(std::memory_order_relaxed) > 0; }

ScopedBatchInvariantGemm::ScopedBatchInvariantGemm() { g_batch_invariant.fetch_add(1); }
ScopedBatchInvariantGemm::~ScopedBatchInvariantGemm() { g_batch_invariant.fetch_sub(1); }
ScopedExactGemm::ScopedExactGemm() { g_exact.fetch_add(1); }
ScopedExactGemm::~ScopedExactGemm() { g_exact.fetch_sub(1); }

namespace gemm_internal {

const char* GemmIsaName(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kAuto:
      return "auto";
    case GemmIsa::kScalar:
      return "scalar";
    case GemmIsa::kAvx2:
      return "avx2";
    case GemmIsa::kAvx512:
      return "avx512";
    case GemmIsa::kAvx512Bf16:
      return "avx512_bf16";
    case GemmIsa::kBlas:
      return "blas";
    case GemmIsa::kPacked:
      return "packed";
    case GemmIsa::kPackedBf16:
      return "packed_bf16";
    case GemmIsa::kAmx:
      return "amx";
  }
  return "?";
}

bool GemmIsaSupported(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kAvx2:
      return CpuHasAvx2();
    case GemmIsa::kAvx512:
      return CpuHasAvx512();
    case GemmIsa::kAvx512Bf16:
    case GemmIsa::kPackedBf16:
      return CpuHasAvx512Bf16();
    case GemmIsa::kAmx:
      return AmxBf16Available();
    default:
      return true;
  }
}

int64_t AmxMinRows() { return kAmxMinRows; }

namespace {
bool ExactAForced() {
  static const bool exact_a = [] {
    const char* env = std::getenv("CCTUNE_GEMM_EXACT_A");
    return env != nullptr && *env != '\0' && std::string_view(env) != "0";
  }();
  return exact_a || g_exact.load(std::memory_order_relaxed) > 0;
}
}  // namespace

bool AmxRouteEnabled() { return !ExactAForced() && AmxBf16Available(); }

int64_t Bf16DotMinRows() { return kBf16DotMinRows; }

bool Bf16DotRouteEnabled() {
  return !ExactAForced() && !AmxBf16Available() && FullRateBf16DotSupported();
}

GemmIsa AutoBf16Route(int64_t m) {
  if (m >= kAmxMinRows && AmxRouteEnabled()) return GemmIsa::kAmx;
  // Batch-invariant (training steps): every m, so that a row's result does not depend on how
  // many rows share the call (2 ranks of half the batch compute as 1 does).
  if (Bf16DotRouteEnabled() && (m >= kBf16DotMinRows || BatchInvariantGemm())) {
    return GemmIsa::kPackedBf16;
  }
  // Fewer rows (decode): the streaming kernel with the bf16 dot.
  if (Bf16DotRouteEnabled()) return GemmIsa::kAvx512Bf16;
  return GemmIsa::kAuto;
}

GemmIsa BestGemmIsa() {
  if (CpuHasAvx512()) return GemmIsa::kAvx512;
  if (CpuHasAvx2()) return GemmIsa::kAvx2;
  return GemmIsa::kScalar;
}

void GemmNTWithIsa(GemmIsa isa, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                   const void* b, DType b_dtype, int64_t ldb, float* c, int64_t ldc, float beta) {
  CCTUNE_CHECK(b_dtype == DType::kF32 || b_dtype == DType::kBF16 || b_dtype == DType::kF16,
               "GemmNT: b_dtype must be f32, bf16 or f16, got ", DTypeName(b_dtype));
  CCTUNE_CHECK(m >= 0 && n >= 0 && k >= 0, "GemmNT: negative size m=", m, " n=", n, " k=", k);
  CCTUNE_CHECK(GemmIsaSupported(isa), "GemmNT: path ", GemmIsaName(isa),
               " is not supported on this CPU");
  CCTUNE_CHECK(m <= 1 || lda >= k, "GemmNT: lda (", lda, ") < k (", k, ")");
  CCTUNE_CHECK(n <= 1 || ldb >= k, "GemmNT: ldb (", ldb, ") < k (", k, ")");
  CCTUNE_CHECK(m <= 1 || ldc >= n, "GemmNT: ldc (", ldc, ") < n (", n, ")");
  if (m == 0 || n == 0) return;
  if (k == 0) {
    ScaleC(m, n, c, ldc, beta);
    return;
  }
  const NtArgs p{m, n, k, a, lda, b, b_dtype, ldb, c, ldc, beta};
  if (isa == GemmIsa::kAuto && b_dtype == DType::kBF16) isa = AutoBf16Route(m);
  if (isa == GemmIsa::kAmx && b_dtype == DType::kF16) isa = GemmIsa::kPacked;
  if (isa == GemmIsa::kAmx) {
    AmxGemm(false, true, m, n, k, a, DType::kF32, std::max<int64_t>(lda, k), b, b_dtype,
            std::max<int64_t>(ldb, k), c, std::max<int64_t>(ldc, n), beta);
  } else if (isa == GemmIsa::kAuto) {
    if (b_dtype != DType::kF32) {
      if (m >= kPackedMinRows16 || m * k * 4 > kMaxStreamABytes) {
        PackedGemmNT(BestPackedIsa(), m, n, k, a, lda, b, b_dtype, ldb, c, ldc, beta);
      } else {
        StreamGemmNT(BestGemmIsa(), p);
      }
    } else if (m > kMaxStreamRowsF32 || m * k * 4 > kMaxStreamABytes) {
      // Measured (gemm_bench SmallM / Prefill, 2026-12-02, loaded 2-core Xeon VM): the packed
      // GEMM (kPacked) within noise of this route, up to ~12% behind at m = 512, so it
      // stays opt-in until a quiet machine says otherwise.
      if (b_dtype == DType::kF32 && LargeGemmRoute() == SgemmPath::kPacked) {
        PackedGemmNT(BestPackedIsa(), m, n, k, a, lda, b, b_dtype, ldb, c, ldc, beta);
      } else {
        BlasGemmNT(p);
      }
    } else {
      StreamGemmNT(BestGemmIsa(), p);
    }
  } else if (isa == GemmIsa::kBlas) {
    BlasGemmNT(p);
  } else if (isa == GemmIsa::kPacked || isa == GemmIsa::kPackedBf16) {
    const PackedIsa path = isa == GemmIsa::kPackedBf16 && b_dtype == DType::kBF16
                               ? PackedIsa::kAvx512Bf16
                               : BestPackedIsa();
    PackedGemmNT(path, m, n, k, a, lda, b, b_dtype, ldb, c, ldc, beta);
  } else {
    StreamGemmNT(isa, p);
  }
}

}  // namespace gemm_internal

void GemmNT(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const void* b,
            DType b_dtype, int64_t ldb, float* c, int64_t ldc, float beta) {
  gemm_internal::GemmNTWithIsa(GemmIsa::kAuto, m, n, k, a, lda, b, b_dtype, ldb, c, ldc, beta);
}

bool GemmNNBf16(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const void* b,
                int64_t ldb, float* c, int64_t ldc, float beta) {
  if (!gemm_internal::Bf16DotRouteEnabled()) return false;
  PackedGemmNN(PackedIsa::kAvx512Bf16, m, n, k, a, lda, b, DType::kBF16, ldb, c, ldc, beta);
  return true;
}

bool GemmTNBf16(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                int64_t ldb, float* c, int64_t ldc, float beta) {
  if (!gemm_internal::Bf16DotRouteEnabled()) return false;
  PackedSgemm(PackedIsa::kAvx512Bf16, true, false, m, n, k, a, lda, b, ldb, c, ldc, beta);
  return true;
}

namespace gemm_internal {
namespace {
std::atomic<int> g_large_route{static_cast<int>(SgemmPath::kAuto)};
}  // namespace

SgemmPath SetLargeGemmRoute(SgemmPath route) {
  return static_cast<SgemmPath>(g_large_route.exchange(static_cast<int>(route)));
}
SgemmPath LargeGemmRoute() { return static_cast<SgemmPath>(g_large_route.load()); }
int64_t SetStreamPrefetchBytes(int64_t bytes) {
  return g_stream_prefetch_bytes.exchange(std::max<int64_t>(0, bytes));
}

const char* SgemmPathName(SgemmPath path) {
  switch (path) {
    case SgemmPath::kAuto:
      return "auto";
    case SgemmPath::kBlas:
      return "blas";
    case SgemmPath::kPacked:
      return "packed";
  }
  return "?";
}

void SgemmStridedWithPath(SgemmPath path, bool trans_a, bool trans_b, int64_t m, int64_t n,
                          int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                          float* c, int64_t ldc, float beta) {
  CCTUNE_CHECK(m >= 0 && n >= 0 && k >= 0, "SgemmStrided: negative size m=", m, " n=", n, " k=", k);
  if (m == 0 || n == 0) return;
  if (k == 0) {
    ScaleC(m, n, c, ldc, beta);
    return;
  }
  if (path == SgemmPath::kAuto && trans_b && !trans_a && m <= kMaxStreamRowsF32 &&
      m * k * 4 <= kMaxStreamABytes) {
    // A · Bᵀ with few rows: the streaming kernel reads B once.
    CCTUNE_CHECK(n <= 1 || ldb >= k, "SgemmStrided: ldb (", ldb, ") < k (", k, ")");
    CCTUNE_CHECK(m <= 1 || (lda >= k && ldc >= n), "SgemmStrided: lda (", lda, ") < k (", k,
                 ") or ldc (", ldc, ") < n (", n, ")");
    const NtArgs p{m, n, k, a, lda, b, DType::kF32, ldb, c, ldc, beta};
    StreamGemmNT(BestGemmIsa(), p);
    return;
  }
  if (path == SgemmPath::kAuto) path = LargeGemmRoute();
  if (path == SgemmPath::kPacked) {
    PackedSgemm(BestPackedIsa(), trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, beta);
    return;
  }
  BlasSgemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, beta);
}

}  // namespace gemm_internal

void SgemmStrided(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
                  int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, float beta) {
  gemm_internal::SgemmStridedWithPath(gemm_internal::SgemmPath::kAuto, trans_a, trans_b, m, n, k,
                                      a, lda, b, ldb, c, ldc, beta);
}

}  // namespace cctune::cpu
