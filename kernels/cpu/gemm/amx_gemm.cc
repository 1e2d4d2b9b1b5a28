#include "kernels/cpu/gemm/amx_gemm.h"

// GCC 12's AVX-512 intrinsic headers trip a false -Wmaybe-uninitialized (GCC PR105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/status.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/simd_targets.h"
#include "kernels/cpu/thread_pool.h"

namespace cctune::cpu {
namespace {

// Below this many multiply-adds a call runs on one thread (fork/join would dominate).
constexpr int64_t kMinParallelMacs = 1 << 15;
// k block: A strip (32 rows) and B micro-panel pair (32 columns) of 512 bf16 are 32 KiB each,
// the B pair stays in L1 (48 KiB) while the A strips stream from L2.
constexpr int64_t kKc = 512;
constexpr int64_t kChunks = kKc / 32;  // 32-wide k steps per block
// Rows of A per m block (1 MiB of packed A per k block, in the 2 MiB L2).
constexpr int64_t kMc = 1024;
constexpr int kTileElems = 16 * 32;  // bf16 per A / B tile

// One operand as a matrix X [rows, k]: element (r, q) at r·ld + q (row form: A, or Bᵀ's
// rows), or at q·ld + r (k-major: Aᵀ's storage, or B [k, n]).
struct Operand {
  const char* base;
  DType dtype;
  int64_t ld;
  bool kmajor;
  int64_t rows, k;
  int64_t elem() const { return dtype == DType::kF32 ? 4 : 2; }
  const char* at(int64_t r, int64_t q) const {
    return base + (kmajor ? q * ld + r : r * ld + q) * elem();
  }
};

CCTUNE_INLINE __mmask16 Mask16(int64_t valid) {
  return valid >= 16 ? static_cast<__mmask16>(0xffff)
                     : static_cast<__mmask16>((1u << std::max<int64_t>(valid, 0)) - 1u);
}
CCTUNE_INLINE __mmask32 Mask32(int64_t valid) {
  return valid >= 32 ? ~__mmask32{0}
                     : static_cast<__mmask32>((1u << std::max<int64_t>(valid, 0)) - 1u);
}

// 32 consecutive values (the first `valid`, rest zero) as bf16, RNE.
CCTUNE_TARGET_AMX CCTUNE_INLINE __m512i Load32(const char* p, DType dtype, int64_t valid) {
  if (dtype == DType::kBF16) return _mm512_maskz_loadu_epi16(Mask32(valid), p);
  const __m512 lo = _mm512_maskz_loadu_ps(Mask16(valid), p);
  const __m512 hi = _mm512_maskz_loadu_ps(Mask16(valid - 16), p + 64);
  return (__m512i)(_mm512_cvtne2ps_pbh(hi, lo));
}

// 16 consecutive values (the first `valid`, rest zero) as bf16, RNE.
CCTUNE_TARGET_AMX CCTUNE_INLINE __m256i Load16(const char* p, DType dtype, int64_t valid) {
  if (dtype == DType::kBF16) return _mm256_maskz_loadu_epi16(Mask16(valid), p);
  return (__m256i)(_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(Mask16(valid), p)));
}

// r[j] <- column j of the 16 x 16 matrix of 32-bit words whose row i is r[i].
CCTUNE_TARGET_AMX CCTUNE_INLINE void Transpose16(__m512i r[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // u[4g + c], 128-bit lane L: rows 4g..4g+3 of column 4L + c.
  for (int g = 0; g < 4; ++g) {
    u[4 * g] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
    u[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
  }
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

// The 16 x 32 block of X at rows [r0, r0 + 16) (nr real), k [q0, q0 + 32) (kv real), zero
// padded, as 16 x 16 words of bf16 pairs along k. RowWords: w[r] = row r's 16 pairs (an A
// tile). PairWords: w[p] = pair p of the 16 rows (a B tile in VNNI layout).
CCTUNE_TARGET_AMX CCTUNE_INLINE void PairWordsKMajor(const Operand& x, int64_t r0, int64_t nr,
                                                     int64_t q0, int64_t kv, __m512i w[16]) {
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9,
                                       24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1,
                                       16, 0);
  for (int p = 0; p < 16; ++p) {
    const __m256i lo =
        2 * p < kv ? Load16(x.at(r0, q0 + 2 * p), x.dtype, nr) : _mm256_setzero_si256();
    const __m256i hi =
        2 * p + 1 < kv ? Load16(x.at(r0, q0 + 2 * p + 1), x.dtype, nr) : _mm256_setzero_si256();
    w[p] = _mm512_permutexvar_epi16(
        idx, _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
  }
}

CCTUNE_TARGET_AMX CCTUNE_INLINE void RowWordsRowForm(const Operand& x, int64_t r0, int64_t nr,
                                                     int64_t q0, int64_t kv, __m512i w[16]) {
  for (int r = 0; r < 16; ++r) {
    if (r < nr) {
      const char* src = x.at(r0 + r, q0);
      _mm_prefetch(src + 4 * 64 * (x.elem() / 2), _MM_HINT_T0);
      w[r] = Load32(src, x.dtype, kv);
    } else {
      w[r] = _mm512_setzero_si512();
    }
  }
}

CCTUNE_TARGET_AMX CCTUNE_INLINE void RowWords(const Operand& x, int64_t r0, int64_t nr,
                                              int64_t q0, int64_t kv, __m512i w[16]) {
  if (x.kmajor) {
    PairWordsKMajor(x, r0, nr, q0, kv, w);
    Transpose16(w);
  } else {
    RowWordsRowForm(x, r0, nr, q0, kv, w);
  }
}

CCTUNE_TARGET_AMX CCTUNE_INLINE void PairWords(const Operand& x, int64_t r0, int64_t nr,
                                               int64_t q0, int64_t kv, __m512i w[16]) {
  if (x.kmajor) {
    PairWordsKMajor(x, r0, nr, q0, kv, w);
  } else {
    RowWordsRowForm(x, r0, nr, q0, kv, w);
    Transpose16(w);
  }
}

// Packs rows [r0, r0 + 16) of X over k block [p0, p0 + klen) into chunks of one tile each
// (dst[ch][16][32] bf16): A tiles (`pairs` false) or VNNI B tiles (true).
CCTUNE_TARGET_AMX void PackStrip(const Operand& x, int64_t r0, int64_t p0, int64_t klen, bool pairs,
                                 uint16_t* dst) {
  const int64_t nr = std::min<int64_t>(16, x.rows - r0);
  for (int64_t ch = 0; ch * 32 < klen; ++ch) {
    __m512i w[16];
    if (nr <= 0) {
      for (int i = 0; i < 16; ++i) w[i] = _mm512_setzero_si512();
    } else if (pairs) {
      PairWords(x, r0, nr, p0 + ch * 32, std::min<int64_t>(32, klen - ch * 32), w);
    } else {
      RowWords(x, r0, nr, p0 + ch * 32, std::min<int64_t>(32, klen - ch * 32), w);
    }
    uint16_t* d = dst + ch * kTileElems;
    for (int i = 0; i < 16; ++i) _mm512_storeu_si512(d + i * 32, w[i]);
  }
}

struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

// Tiles: 0..3 C (C00 C01 C10 C11), 4, 5 A (rows 0-15, 16-31), 6, 7 B (columns 0-15, 16-31).
CCTUNE_TARGET_AMX void ConfigureTiles() {
  TileConfig cfg;
  std::memset(&cfg, 0, sizeof(cfg));
  cfg.palette_id = 1;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  _tile_loadconfig(&cfg);
}

// C block [32 x 32] (mr x nr real) += A strips (a0, a1) · B panels (b0, b1) over `chunks`
// k steps; load_c false starts from zero (C not read).
CCTUNE_TARGET_AMX void Kernel(int64_t chunks, const uint16_t* a0, const uint16_t* a1,
                              const uint16_t* b0, const uint16_t* b1, float* c, int64_t ldc,
                              bool load_c, int mr, int nr) {
  alignas(64) float scratch[32 * 32];
  const bool full = mr == 32 && nr == 32;
  float* cp = full ? c : scratch;
  const int64_t stride = (full ? ldc : 32) * 4;
  const int64_t ld = full ? ldc : 32;
  if (load_c) {
    if (!full) {
      for (int i = 0; i < 32; ++i) {
        const __mmask16 m0 = i < mr ? Mask16(nr) : 0, m1 = i < mr ? Mask16(nr - 16) : 0;
        _mm512_store_ps(scratch + i * 32, _mm512_maskz_loadu_ps(m0, c + i * ldc));
        _mm512_store_ps(scratch + i * 32 + 16, _mm512_maskz_loadu_ps(m1, c + i * ldc + 16));
      }
    }
    _tile_loadd(0, cp, stride);
    _tile_loadd(1, cp + 16, stride);
    _tile_loadd(2, cp + 16 * ld, stride);
    _tile_loadd(3, cp + 16 * ld + 16, stride);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  for (int64_t ch = 0; ch < chunks; ++ch) {
    _tile_loadd(4, a0 + ch * kTileElems, 64);
    _tile_loadd(6, b0 + ch * kTileElems, 64);
    _tile_loadd(7, b1 + ch * kTileElems, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_loadd(5, a1 + ch * kTileElems, 64);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, cp, stride);
  _tile_stored(1, cp + 16, stride);
  _tile_stored(2, cp + 16 * ld, stride);
  _tile_stored(3, cp + 16 * ld + 16, stride);
  if (!full) {
    for (int i = 0; i < mr; ++i) {
      _mm512_mask_storeu_ps(c + i * ldc, Mask16(nr), _mm512_load_ps(scratch + i * 32));
      _mm512_mask_storeu_ps(c + i * ldc + 16, Mask16(nr - 16),
                            _mm512_load_ps(scratch + i * 32 + 16));
    }
  }
}

struct Problem {
  Operand a, b;  // A [m, k] and Bᵀ [n, k] as operands
  int64_t m, n, k;
  float* c;
  int64_t ldc;
  bool beta_one;  // else beta == 0
};

// Splits [0, n) into `parts` nearly equal ranges of whole units of `align`.
void Split(int64_t n, int parts, int index, int64_t align, int64_t* begin, int64_t* end) {
  const int64_t units = (n + align - 1) / align;
  const int64_t per = units / parts, extra = units % parts;
  const int64_t u0 = index * per + std::min<int64_t>(index, extra);
  const int64_t u1 = u0 + per + (index < extra ? 1 : 0);
  *begin = std::min(n, u0 * align);
  *end = std::min(n, u1 * align);
}

// Rows [i0, i1) x columns [j0, j1) of C (i0, j0 multiples of 32). apack: [kb][strip16][chunk].
CCTUNE_TARGET_AMX void ComputeBlock(const Problem& p, const uint16_t* apack, int64_t strips,
                                    int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  thread_local std::vector<uint16_t> bpack_storage;
  if (bpack_storage.size() < static_cast<size_t>(2 * kChunks * kTileElems)) {
    bpack_storage.resize(2 * kChunks * kTileElems);
  }
  uint16_t* b0 = bpack_storage.data();
  uint16_t* b1 = b0 + kChunks * kTileElems;
  ConfigureTiles();
  for (int64_t p0 = 0; p0 < p.k; p0 += kKc) {
    const int64_t klen = std::min(kKc, p.k - p0), chunks = (klen + 31) / 32;
    const bool load_c = p0 > 0 || p.beta_one;
    const uint16_t* ablock = apack + (p0 / kKc) * strips * kChunks * kTileElems;
    for (int64_t ic = i0; ic < i1; ic += kMc) {
      const int64_t ie = std::min(i1, ic + kMc);
      for (int64_t jr = j0; jr < j1; jr += 32) {
        PackStrip(p.b, jr, p0, klen, /*pairs=*/true, b0);
        PackStrip(p.b, jr + 16, p0, klen, /*pairs=*/true, b1);
        const int nr = static_cast<int>(std::min<int64_t>(32, j1 - jr));
        for (int64_t i = ic; i < ie; i += 32) {
          const uint16_t* a0 = ablock + (i / 16) * kChunks * kTileElems;
          const int mr = static_cast<int>(std::min<int64_t>(32, p.m - i));
          Kernel(chunks, a0, a0 + kChunks * kTileElems, b0, b1, p.c + i * p.ldc + jr, p.ldc,
                 load_c, mr, nr);
        }
      }
    }
  }
  _tile_release();
}

void Run(const Problem& p) {
  const int64_t strips = (p.m + 31) / 32 * 2, kblocks = (p.k + kKc - 1) / kKc;
  thread_local std::vector<uint16_t> apack_storage;
  const size_t need = static_cast<size_t>(kblocks * strips * kChunks * kTileElems);
  if (apack_storage.size() < need) apack_storage.resize(need);
  uint16_t* apack = apack_storage.data();
  const bool parallel = p.m * p.n * p.k >= kMinParallelMacs && !omp_in_parallel() &&
                        !ThreadPool::InsideTask();
#pragma omp parallel if (parallel)
  {
#pragma omp for schedule(static)
    for (int64_t t = 0; t < kblocks * strips; ++t) {
      const int64_t kb = t / strips, st = t % strips, p0 = kb * kKc;
      PackStrip(p.a, st * 16, p0, std::min(kKc, p.k - p0), /*pairs=*/false,
                apack + t * kChunks * kTileElems);
    }
    // (the loop's barrier: A is packed) Threads split n in 32-column units, or m when n gives
    // fewer than two units per thread.
    const int nt = omp_get_num_threads(), tid = omp_get_thread_num();
    const int64_t col_units = (p.n + 31) / 32, row_units = (p.m + 31) / 32;
    int64_t i0 = 0, i1 = p.m, j0 = 0, j1 = p.n;
    if (col_units >= 2 * nt || row_units < nt) {
      Split(p.n, nt, tid, 32, &j0, &j1);
    } else {
      Split(p.m, nt, tid, 32, &i0, &i1);
    }
    if (i0 < i1 && j0 < j1) ComputeBlock(p, apack, strips, i0, i1, j0, j1);
  }
}

}  // namespace

bool AmxBf16Available() { return AmxSupported(); }

void AmxGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const void* a,
             DType a_dtype, int64_t lda, const void* b, DType b_dtype, int64_t ldb, float* c,
             int64_t ldc, float beta) {
  CCTUNE_CHECK(AmxBf16Available(), "AmxGemm: AMX-BF16 is not available here (CPU ",
               IsaLevelName(CpuIsaLevel()), ", AMX ", CpuHasAmxBf16() ? "yes" : "no",
               ", active level ", IsaLevelName(ActiveIsaLevel()), ")");
  CCTUNE_CHECK(a_dtype == DType::kF32 || a_dtype == DType::kBF16,
               "AmxGemm: a_dtype must be f32 or bf16, got ", DTypeName(a_dtype));
  CCTUNE_CHECK(b_dtype == DType::kF32 || b_dtype == DType::kBF16,
               "AmxGemm: b_dtype must be f32 or bf16, got ", DTypeName(b_dtype));
  CCTUNE_CHECK(m >= 0 && n >= 0 && k >= 0, "AmxGemm: negative size m=", m, " n=", n, " k=", k);
  CCTUNE_CHECK(lda >= std::max<int64_t>(1, trans_a ? m : k), "AmxGemm: lda (", lda,
               ") too small");
  CCTUNE_CHECK(ldb >= std::max<int64_t>(1, trans_b ? k : n), "AmxGemm: ldb (", ldb,
               ") too small");
  CCTUNE_CHECK(m <= 1 || ldc >= n, "AmxGemm: ldc (", ldc, ") < n (", n, ")");
  if (m == 0 || n == 0) return;
  if (beta != 0.f && beta != 1.f) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] *= beta;
    }
  }
  if (k == 0) {
    if (beta == 0.f) {
      for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.f);
    }
    return;
  }
  Problem p;
  p.a = Operand{static_cast<const char*>(a), a_dtype, lda, trans_a, m, k};
  p.b = Operand{static_cast<const char*>(b), b_dtype, ldb, !trans_b, n, k};
  p.m = m;
  p.n = n;
  p.k = k;
  p.c = c;
  p.ldc = ldc;
  p.beta_one = beta != 0.f;
  Run(p);
}

}  // namespace cctune::cpu
