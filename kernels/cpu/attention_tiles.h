// Register-tile kernels shared by the attention forward (kernels/cpu/attention.cc) and
// backward (kernels/cpu/attention_backward.cc): a block of rows times a block of transposed
// columns (scores q·kᵀ, dy·vᵀ) and weighted sums of rows (P·V, dS·K, Pᵀ·dY, dSᵀ·Q), with the
// accumulators in vector registers. Every sum runs over its index in order, one multiply-add
// at a time, so the results do not depend on how rows or columns are grouped.
#ifndef CCTUNE_KERNELS_CPU_ATTENTION_TILES_H_
#define CCTUNE_KERNELS_CPU_ATTENTION_TILES_H_

#include <cstdint>
#include <cstring>

namespace cctune {
namespace cpu {
namespace tiles {

// 16 floats as one value (GCC/Clang vector extension; one AVX-512 register, two AVX ones), so
// the tile kernels keep their accumulators in registers. Loads and stores go through memcpy
// (no alignment assumed).
typedef float V16 __attribute__((vector_size(64)));
constexpr int64_t kLanes = 16;
// The widest column block RowsTimesCols takes (4 vectors).
constexpr int64_t kMaxTileCols = 4 * kLanes;

inline V16 LoadV(const float* p) {
  V16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void StoreV(float* p, V16 v) { std::memcpy(p, &v, sizeof(v)); }

// The lanes of v folded by `op` in a tree (8 + 4 + 2 + 1 lanes), 4 shuffles deep instead of a
// 15-long chain of scalar operations (whose latency showed in the attention's per-block max
// and sum: a row's 64 keys cost ~15% more than their multiply-adds that way).
typedef int32_t I16 __attribute__((vector_size(64)));
template <typename Op>
inline float FoldLanes(V16 v, Op op) {
  v = op(v, __builtin_shuffle(v, I16{8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7}));
  v = op(v, __builtin_shuffle(v, I16{4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11}));
  v = op(v, __builtin_shuffle(v, I16{2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13}));
  v = op(v, __builtin_shuffle(v, I16{1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14}));
  return v[0];
}
// max of the lanes where none is NaN (the same max in any order).
inline float MaxLanes(V16 v) {
  return FoldLanes(v, [](V16 a, V16 b) { return a > b ? a : b; });
}
inline float SumLanes(V16 v) {
  return FoldLanes(v, [](V16 a, V16 b) { return a + b; });
}

// The tile kernels below work in the build's native vector NV (one register: 16 floats with
// AVX-512, 8 with AVX, 4 with SSE); V16 above is for the callers' 16-lane row code. A V16 on a
// narrower build is split by GCC into several registers, and its memcpy loads went through
// general registers (vmovq / vpinsrq) with the accumulators spilled: prefill attention ran at
// 7 GFLOP/s on a Zen 3 that way.
//
// Tile shapes (accumulators NR x KC native vectors): AVX-512 6 x 4 (24 + 4 operands of the 32
// zmm), AVX 6 x 2 (12 + 2 + a broadcast of the 16 ymm, the shape of the 6 x 16 f32 GEMM
// kernel), SSE 4 x 2. A column block wider than one tile runs as several calls, each over the
// whole n: the same sums in the same order.
#if defined(__AVX512F__)
typedef float NV __attribute__((vector_size(64)));
// Pins a vector in registers: without it GCC folds the load into every multiply-add that uses
// it, one load per use instead of one per value, and the tiles become load-bound
// (kernels/cpu/simd_targets.h has the same for the GEMMs).
#define CCTUNE_PIN_NV(x) __asm__("" : "+v"(x))
constexpr int kTileRowsPerKernel = 6;
constexpr int kTileVecs = 4;
#elif defined(__AVX__)
typedef float NV __attribute__((vector_size(32)));
#define CCTUNE_PIN_NV(x) __asm__("" : "+x"(x))
constexpr int kTileRowsPerKernel = 6;
constexpr int kTileVecs = 2;
#else
typedef float NV __attribute__((vector_size(16)));
#define CCTUNE_PIN_NV(x) __asm__("" : "+x"(x))
constexpr int kTileRowsPerKernel = 4;
constexpr int kTileVecs = 2;
#endif
constexpr int64_t kNvLanes = sizeof(NV) / sizeof(float);
static_assert(kLanes % kNvLanes == 0, "a V16 is whole native vectors");

inline NV LoadNv(const float* p) {
  NV v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void StoreNv(float* p, NV v) { std::memcpy(p, &v, sizeof(v)); }

// out[r·ldo + (0, kNvLanes·KC)) = sum_{e < n} a[r·lda + e] · bt[e·ldb + (0, kNvLanes·KC)) for
// NR rows.
template <int NR, int KC>
void RowsTimesColsN(const float* a, int64_t lda, const float* bt, int64_t ldb, int64_t n,
                    float* out, int64_t ldo) {
  NV acc[NR][KC] = {};
  for (int64_t e = 0; e < n; ++e) {
    NV bv[KC];
    for (int c = 0; c < KC; ++c) {
      bv[c] = LoadNv(bt + e * ldb + c * kNvLanes);
      CCTUNE_PIN_NV(bv[c]);
    }
    for (int r = 0; r < NR; ++r) {
      const float av = a[r * lda + e];
      for (int c = 0; c < KC; ++c) acc[r][c] += av * bv[c];
    }
  }
  for (int r = 0; r < NR; ++r) {
    for (int c = 0; c < KC; ++c) StoreNv(out + r * ldo + c * kNvLanes, acc[r][c]);
  }
}
// The last rows < kTileRowsPerKernel of a block in one call.
template <int KC, int NR = kTileRowsPerKernel - 1>
void RowsTimesColsTail(const float* a, int64_t rows, int64_t lda, const float* bt, int64_t ldb,
                       int64_t n, float* out, int64_t ldo) {
  if constexpr (NR > 1) {
    if (rows < NR) return RowsTimesColsTail<KC, NR - 1>(a, rows, lda, bt, ldb, n, out, ldo);
  }
  if (rows == NR) RowsTimesColsN<NR, KC>(a, lda, bt, ldb, n, out, ldo);
}
template <int KC>
void RowsTimesColsK(const float* a, int64_t rows, int64_t lda, const float* bt, int64_t ldb,
                    int64_t n, float* out, int64_t ldo) {
  constexpr int kRows = kTileRowsPerKernel;
  int64_t r = 0;
  for (; r + kRows <= rows; r += kRows) {
    RowsTimesColsN<kRows, KC>(a + r * lda, lda, bt, ldb, n, out + r * ldo, ldo);
  }
  if (r < rows) RowsTimesColsTail<KC>(a + r * lda, rows - r, lda, bt, ldb, n, out + r * ldo, ldo);
}
// Columns [0, KC · kNvLanes) first, then the rest in smaller tiles.
template <int KC>
void RowsTimesColsVecs(const float* a, int64_t rows, int64_t lda, const float* bt, int64_t ldb,
                       int64_t n, int64_t vecs, float* out, int64_t ldo) {
  for (; vecs >= KC; vecs -= KC, bt += KC * kNvLanes, out += KC * kNvLanes) {
    RowsTimesColsK<KC>(a, rows, lda, bt, ldb, n, out, ldo);
  }
  if constexpr (KC > 1) {
    if (vecs > 0) RowsTimesColsVecs<KC - 1>(a, rows, lda, bt, ldb, n, vecs, out, ldo);
  }
}
// out [rows, ceil(cols / 16) · 16] = A [rows, n] · Bt [n, ...] for 1 <= cols <= kMaxTileCols:
// the columns past `cols` up to the next whole V16 are computed too (bt must be readable
// there; callers zero-pad), the rest of out's row is left alone.
inline void RowsTimesCols(const float* a, int64_t rows, int64_t lda, const float* bt,
                          int64_t ldb, int64_t n, int64_t cols, float* out, int64_t ldo) {
  const int64_t vecs = (cols + kLanes - 1) / kLanes * (kLanes / kNvLanes);
  RowsTimesColsVecs<kTileVecs>(a, rows, lda, bt, ldb, n, vecs, out, ldo);
}

// acc[r·ldacc + (0, kNvLanes·NC)) += sum_{j < nj} w[r·wr + j·wj] · x[j·ldx + (0, kNvLanes·NC))
// for NR accumulator rows: rows x_j weighted and summed.
template <int NR, int NC>
void WeightedRowSumN(const float* w, int64_t wr, int64_t wj, int64_t nj, const float* x,
                     int64_t ldx, float* acc, int64_t ldacc) {
  NV a[NR][NC];
  for (int r = 0; r < NR; ++r) {
    for (int c = 0; c < NC; ++c) a[r][c] = LoadNv(acc + r * ldacc + c * kNvLanes);
  }
  for (int64_t j = 0; j < nj; ++j) {
    NV xv[NC];
    for (int c = 0; c < NC; ++c) {
      xv[c] = LoadNv(x + j * ldx + c * kNvLanes);
      CCTUNE_PIN_NV(xv[c]);
    }
    for (int r = 0; r < NR; ++r) {
      const float wv = w[r * wr + j * wj];
      for (int c = 0; c < NC; ++c) a[r][c] += wv * xv[c];
    }
  }
  for (int r = 0; r < NR; ++r) {
    for (int c = 0; c < NC; ++c) StoreNv(acc + r * ldacc + c * kNvLanes, a[r][c]);
  }
}
// WeightedRowSumN over NR rows and `vecs` native vectors per row (any count).
template <int NR, int NC = kTileVecs>
void WeightedRowSumCols(const float* w, int64_t wr, int64_t wj, int64_t nj, const float* x,
                        int64_t ldx, float* acc, int64_t ldacc, int64_t vecs) {
  for (; vecs >= NC; vecs -= NC, x += NC * kNvLanes, acc += NC * kNvLanes) {
    WeightedRowSumN<NR, NC>(w, wr, wj, nj, x, ldx, acc, ldacc);
  }
  if constexpr (NC > 1) {
    if (vecs > 0) WeightedRowSumCols<NR, NC - 1>(w, wr, wj, nj, x, ldx, acc, ldacc, vecs);
  }
}
template <int NR = kTileRowsPerKernel - 1>
void WeightedRowSumTail(const float* w, int64_t wr, int64_t wj, int64_t nj, const float* x,
                        int64_t ldx, float* acc, int64_t ldacc, int64_t rows, int64_t vecs) {
  if constexpr (NR > 1) {
    if (rows < NR) {
      return WeightedRowSumTail<NR - 1>(w, wr, wj, nj, x, ldx, acc, ldacc, rows, vecs);
    }
  }
  if (rows == NR) WeightedRowSumCols<NR>(w, wr, wj, nj, x, ldx, acc, ldacc, vecs);
}
// acc [rows, 16·chunks] += W [rows, nj] · X [nj, 16·chunks], W's element (r, j) at
// w[r·wr + j·wj] (so W or Wᵀ as stored).
inline void WeightedRowSums(const float* w, int64_t wr, int64_t wj, int64_t nj, const float* x,
                            int64_t ldx, float* acc, int64_t ldacc, int64_t rows,
                            int64_t chunks) {
  if (nj <= 0 || rows <= 0) return;
  constexpr int kRows = kTileRowsPerKernel;
  const int64_t vecs = chunks * (kLanes / kNvLanes);
  int64_t r = 0;
  for (; r + kRows <= rows; r += kRows) {
    WeightedRowSumCols<kRows>(w + r * wr, wr, wj, nj, x, ldx, acc + r * ldacc, ldacc, vecs);
  }
  if (r < rows) {
    WeightedRowSumTail(w + r * wr, wr, wj, nj, x, ldx, acc + r * ldacc, ldacc, rows - r, vecs);
  }
}

}  // namespace tiles
}  // namespace cpu
}  // namespace cctune

#endif  // CCTUNE_KERNELS_CPU_ATTENTION_TILES_H_
