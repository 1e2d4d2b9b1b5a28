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

// Pins a vector in registers (AVX-512, where V16 is one register): without it GCC folds the
// load into every multiply-add that uses it, one load per use instead of one per value, and
// the tiles become load-bound (kernels/cpu/simd_targets.h has the same for the GEMMs).
#if defined(__AVX512F__)
#define CCTUNE_PIN_V16(x) __asm__("" : "+v"(x))
constexpr int kTileRowsPerKernel = 6;  // 24 accumulators + 4 operands of the 32 registers
#else
#define CCTUNE_PIN_V16(x) ((void)0)
constexpr int kTileRowsPerKernel = 2;  // 8 accumulators (16 of the 16 AVX registers)
#endif

// out[r·ldo + (0, 16·KC)) = sum_{e < n} a[r·lda + e] · bt[e·ldb + (0, 16·KC)) for NR rows.
template <int NR, int KC>
void RowsTimesColsN(const float* a, int64_t lda, const float* bt, int64_t ldb, int64_t n,
                    float* out, int64_t ldo) {
  V16 acc[NR][KC] = {};
  for (int64_t e = 0; e < n; ++e) {
    V16 bv[KC];
    for (int c = 0; c < KC; ++c) {
      bv[c] = LoadV(bt + e * ldb + c * kLanes);
      CCTUNE_PIN_V16(bv[c]);
    }
    for (int r = 0; r < NR; ++r) {
      const float av = a[r * lda + e];
      for (int c = 0; c < KC; ++c) acc[r][c] += av * bv[c];
    }
  }
  for (int r = 0; r < NR; ++r) {
    for (int c = 0; c < KC; ++c) StoreV(out + r * ldo + c * kLanes, acc[r][c]);
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
// out [rows, ceil(cols / 16) · 16] = A [rows, n] · Bt [n, ...] for 1 <= cols <= kMaxTileCols:
// the columns past `cols` up to the next whole vector are computed too (bt must be readable
// there; callers zero-pad), the rest of out's row is left alone.
inline void RowsTimesCols(const float* a, int64_t rows, int64_t lda, const float* bt,
                          int64_t ldb, int64_t n, int64_t cols, float* out, int64_t ldo) {
  static_assert(kMaxTileCols == 4 * kLanes, "RowsTimesCols dispatches 1 to 4 vectors");
  switch ((cols + kLanes - 1) / kLanes) {
    case 1:
      return RowsTimesColsK<1>(a, rows, lda, bt, ldb, n, out, ldo);
    case 2:
      return RowsTimesColsK<2>(a, rows, lda, bt, ldb, n, out, ldo);
    case 3:
      return RowsTimesColsK<3>(a, rows, lda, bt, ldb, n, out, ldo);
    default:
      return RowsTimesColsK<4>(a, rows, lda, bt, ldb, n, out, ldo);
  }
}

// acc[r·ldacc + (0, 16·NC)) += sum_{j < nj} w[r·wr + j·wj] · x[j·ldx + (0, 16·NC)) for NR
// accumulator rows: rows x_j weighted and summed.
template <int NR, int NC>
void WeightedRowSumN(const float* w, int64_t wr, int64_t wj, int64_t nj, const float* x,
                     int64_t ldx, float* acc, int64_t ldacc) {
  V16 a[NR][NC];
  for (int r = 0; r < NR; ++r) {
    for (int c = 0; c < NC; ++c) a[r][c] = LoadV(acc + r * ldacc + c * kLanes);
  }
  for (int64_t j = 0; j < nj; ++j) {
    V16 xv[NC];
    for (int c = 0; c < NC; ++c) {
      xv[c] = LoadV(x + j * ldx + c * kLanes);
      CCTUNE_PIN_V16(xv[c]);
    }
    for (int r = 0; r < NR; ++r) {
      const float wv = w[r * wr + j * wj];
      for (int c = 0; c < NC; ++c) a[r][c] += wv * xv[c];
    }
  }
  for (int r = 0; r < NR; ++r) {
    for (int c = 0; c < NC; ++c) StoreV(acc + r * ldacc + c * kLanes, a[r][c]);
  }
}
// WeightedRowSumN over NR rows and `chunks` vectors per row (any count).
template <int NR>
void WeightedRowSumCols(const float* w, int64_t wr, int64_t wj, int64_t nj, const float* x,
                        int64_t ldx, float* acc, int64_t ldacc, int64_t chunks) {
  int64_t c = 0;
  for (; c + 4 <= chunks; c += 4) {
    WeightedRowSumN<NR, 4>(w, wr, wj, nj, x + c * kLanes, ldx, acc + c * kLanes, ldacc);
  }
  for (; c + 2 <= chunks; c += 2) {
    WeightedRowSumN<NR, 2>(w, wr, wj, nj, x + c * kLanes, ldx, acc + c * kLanes, ldacc);
  }
  for (; c < chunks; ++c) {
    WeightedRowSumN<NR, 1>(w, wr, wj, nj, x + c * kLanes, ldx, acc + c * kLanes, ldacc);
  }
}
template <int NR = kTileRowsPerKernel - 1>
void WeightedRowSumTail(const float* w, int64_t wr, int64_t wj, int64_t nj, const float* x,
                        int64_t ldx, float* acc, int64_t ldacc, int64_t rows, int64_t chunks) {
  if constexpr (NR > 1) {
    if (rows < NR) {
      return WeightedRowSumTail<NR - 1>(w, wr, wj, nj, x, ldx, acc, ldacc, rows, chunks);
    }
  }
  if (rows == NR) WeightedRowSumCols<NR>(w, wr, wj, nj, x, ldx, acc, ldacc, chunks);
}
// acc [rows, 16·chunks] += W [rows, nj] · X [nj, 16·chunks], W's element (r, j) at
// w[r·wr + j·wj] (so W or Wᵀ as stored).
inline void WeightedRowSums(const float* w, int64_t wr, int64_t wj, int64_t nj, const float* x,
                            int64_t ldx, float* acc, int64_t ldacc, int64_t rows,
                            int64_t chunks) {
  if (nj <= 0 || rows <= 0) return;
  constexpr int kRows = kTileRowsPerKernel;
  int64_t r = 0;
  for (; r + kRows <= rows; r += kRows) {
    WeightedRowSumCols<kRows>(w + r * wr, wr, wj, nj, x, ldx, acc + r * ldacc, ldacc, chunks);
  }
  if (r < rows) {
    WeightedRowSumTail(w + r * wr, wr, wj, nj, x, ldx, acc + r * ldacc, ldacc, rows - r, chunks);
  }
}

}  // namespace tiles
}  // namespace cpu
}  // namespace cctune

#endif  // CCTUNE_KERNELS_CPU_ATTENTION_TILES_H_
