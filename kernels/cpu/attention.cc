#include "kernels/cpu/attention.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/attention_tiles.h"
#include "kernels/cpu/cpu_util.h"
#include "kernels/cpu/gemm/gemm.h"
#include "kernels/cpu/simd_targets.h"
#include "kernels/cpu/thread_pool.h"

namespace cctune {
namespace cpu {
namespace {

constexpr int64_t kBlockKeys = 64;      // keys per online-softmax step
constexpr int64_t kTileRows = 32;       // target query rows (heads x positions) per unit
constexpr int64_t kMinSplitKeys = 256;  // fewest keys worth a split of their own
// Tiles with at least this many rows, of heads at least this long, compute QKᵀ and PV as
// GEMMs (kernels/cpu/gemm) instead of row-by-row dot products and axpys. Shorter heads (the
// demo model's 16) were slower through the GEMM calls (same-run A/B).
constexpr int64_t kMinGemmRows = 8;
constexpr int64_t kMinGemmHeadDim = 32;
// Such tiles of heads that are whole 16-float vectors compute QKᵀ and PV in registers instead
// (kernels/cpu/attention_tiles.h, against a transposed copy of K made once per call): the
// tiles' GEMMs (30 x 64 x 64 at the 15.7M model's training shape) were small enough for the
// GEMM library's per-call cost to dominate. (The demo model's 16-long heads were ~15% slower
// this way than as dot products, 1-thread A/B, so they keep those.) At most this many floats
// of transposed K.
constexpr int64_t kMaxTransposedKeys = int64_t{1} << 24;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Heads the bf16 route takes: whole 16-lane vectors of V pairs.
constexpr int64_t kLanesBf16Route = 16;

struct Args {
  int64_t b, n_h, n_kv, g, s_q, s_kv, hd;
  float scale;
  bool causal;
  const void* q;
  const void* k;
  const void* v;
  void* out;
  DType qt, kt, vt, ot;
  int64_t qs[4], ks[4], vs[4], os[4];
  const uint8_t* mask;  // null: no mask
  int64_t ms[3];
  float* lse;  // null: not wanted
  int64_t ls[3];
  // Units run on the decode thread pool (s_q == 1): no GEMM calls from inside its tasks.
  bool single_row_units = false;
  // K transposed block by block, f32 [b][n_kv][kt_ld / kBlockKeys][hd][kBlockKeys] (kt_ld:
  // s_kv rounded up to whole key blocks, zero past s_kv), for the register kernels; null: the
  // GEMM or dot-product paths. Each block's transposed keys are contiguous (16 KiB at h_d 64):
  // rows of a whole-sequence transpose lie s_kv floats apart, a multiple of 4 KiB at the
  // training shapes, and the block's 64 rows then fell into a few L1 sets and were refetched
  // by every row group of the tile.
  const float* kt_all = nullptr;
  int64_t kt_ld = 0;
  // The bf16 dot-product route (Bf16PairsRoute below): K and V as bf16 pairs, key block by
  // key block, [b][n_kv][kv_blocks] blocks of kBlockKeys keys (zero past s_kv):
  // kt_pairs block [hd / 2][kBlockKeys], word (e, j) = k[j][2e] | k[j][2e + 1] << 16;
  // v_pairs block [kBlockKeys / 2][hd], word (p, d) = v[2p][d] | v[2p + 1][d] << 16.
  const uint32_t* kt_pairs = nullptr;
  const uint32_t* v_pairs = nullptr;
  int64_t kv_blocks = 0;
};

// The bf16 dot-product route of the prefill attention: on a CPU where the GEMMs take the
// vdpbf16ps kernels (gemm_internal::Bf16DotRouteEnabled(): bf16 dot products at the f32 FMA's
// instruction rate, twice its flops; CCTUNE_GEMM_EXACT_A unset), a bf16 K and V (a bf16 model's
// cache), no log-sum-exp wanted (inference; training keeps the f32 route its backward
// matches) and tiles of rows, Q·Kᵀ and P·V run as bf16 dot products: the scaled queries and
// the probabilities P are rounded to bf16 (relative error <= 2^-9 each), as the GEMMs round
// their activations, K and V are the cache's values exactly, and every sum is f32. On Zen 4 the
// 1.1B model's 512-token prefill spent 7.5% in attention at 161-170 GFLOP/s on the f32 tiles.
bool Bf16PairsRoute(int64_t b, int64_t n_h, int64_t n_kv, int64_t s_q, int64_t s_kv,
                    int64_t hd, DType kt, DType vt) {
  if (n_kv <= 0 || s_q <= 1 || kt != DType::kBF16 || vt != DType::kBF16) return false;
  const int64_t g = n_h / n_kv;
  const int64_t max_rows = g * std::clamp<int64_t>(kTileRows / std::max<int64_t>(g, 1), 1, s_q);
  const int64_t kv_blocks = (s_kv + kBlockKeys - 1) / kBlockKeys;
  return hd % kLanesBf16Route == 0 && max_rows >= kMinGemmRows &&
         b * n_kv * hd * kv_blocks * kBlockKeys <= kMaxTransposedKeys &&
         gemm_internal::Bf16DotRouteEnabled();
}

using tiles::kLanes;
using tiles::LoadV;
using tiles::V16;
static_assert(kBlockKeys == tiles::kMaxTileCols, "a key block is one register tile of columns");

// Per-thread buffers for one unit: rows = heads x positions of the tile.
struct Scratch {
  FloatBuffer q, kbuf, vbuf, s, acc;
  std::vector<float> m, l;
  std::vector<char> active;  // row had an allowed key in the current block
  std::vector<const float*> kp, vp;
  std::vector<uint32_t> qpairs, ppairs;  // the bf16 route's Q [rows][hd / 2], P [rows][32]
  void Reserve(int64_t rows, int64_t hd) {
    qpairs.resize(rows * ((hd + 1) / 2));
    ppairs.resize(rows * (kBlockKeys / 2));
    q.Resize(rows * hd);
    kbuf.Resize(kBlockKeys * hd);
    vbuf.Resize(kBlockKeys * hd);
    s.Resize(rows * kBlockKeys);
    acc.Resize(rows * hd);
    m.resize(rows);
    l.resize(rows);
    active.resize(rows);
    kp.resize(kBlockKeys);
    vp.resize(kBlockKeys);
  }
};

// Pointers to `n` f32 rows of a [s_kv, hd] head slice starting at key j0: in place when f32
// with unit stride, else converted into buf.
void BlockRows(const void* base, DType t, int64_t row_stride, int64_t col_stride, int64_t j0,
               int64_t n, int64_t hd, float* buf, const float** rows) {
  if (t == DType::kF32 && (col_stride == 1 || hd == 1)) {
    for (int64_t j = 0; j < n; ++j) {
      rows[j] = static_cast<const float*>(base) + (j0 + j) * row_stride;
    }
    return;
  }
  for (int64_t j = 0; j < n; ++j) {
    LoadF32(ElemAddr(base, t, (j0 + j) * row_stride), t, col_stride, hd, buf + j * hd);
    rows[j] = buf + j * hd;
  }
}

// The row stride of BlockRows' `n` rows (evenly spaced: in place, or converted into buf).
int64_t RowsLd(const float* const* rows, int64_t n, int64_t hd) {
  return n > 1 ? rows[1] - rows[0] : hd;
}

inline void Dot4(const float* q, const float* k0, const float* k1, const float* k2, const float* k3,
                 int64_t hd, float* out) {
  float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
  for (int64_t d = 0; d < hd; ++d) {
    s0 += q[d] * k0[d];
    s1 += q[d] * k1[d];
    s2 += q[d] * k2[d];
    s3 += q[d] * k3[d];
  }
  out[0] = s0;
  out[1] = s1;
  out[2] = s2;
  out[3] = s3;
}

inline float Dot(const float* q, const float* k, int64_t hd) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t d = 0; d < hd; ++d) s += q[d] * k[d];
  return s;
}

// The bf16 route's register tiles (AVX-512 BF16): NR rows of 16-lane accumulators, one
// vdpbf16ps per row and vector per pair.
// s[r·kBlockKeys + j] = sum_e qp[r·qld + e] ·· kt[e·kBlockKeys + j] over `pairs` pairs (·· a
// pair's two products), for NR rows and all kBlockKeys columns.
template <int NR>
CCTUNE_TARGET_AVX512BF16 void QkPairsRows(const uint32_t* qp, int64_t qld, const uint32_t* kt,
                                          int64_t pairs, float* s) {
  constexpr int kVecs = kBlockKeys / 16;
  __m512 acc[NR][kVecs];
  for (int r = 0; r < NR; ++r) {
    for (int c = 0; c < kVecs; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  for (int64_t e = 0; e < pairs; ++e) {
    __m512bh kv[kVecs];
    for (int c = 0; c < kVecs; ++c) {
      kv[c] = (__m512bh)_mm512_loadu_si512(kt + e * kBlockKeys + 16 * c);
    }
    for (int r = 0; r < NR; ++r) {
      const __m512bh qv = (__m512bh)_mm512_set1_epi32(static_cast<int32_t>(qp[r * qld + e]));
      for (int c = 0; c < kVecs; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], qv, kv[c]);
    }
  }
  for (int r = 0; r < NR; ++r) {
    for (int c = 0; c < kVecs; ++c) _mm512_storeu_ps(s + r * kBlockKeys + 16 * c, acc[r][c]);
  }
}
// acc[r·hd + (0, 16·NC)) += sum_p pp[r·(kBlockKeys / 2) + p] ·· vp[p·hd + (0, 16·NC)) over
// `pairs` key pairs, for NR rows.
template <int NR, int NC>
CCTUNE_TARGET_AVX512BF16 void PvPairsRows(const uint32_t* pp, const uint32_t* vp, int64_t hd,
                                          int64_t pairs, float* acc) {
  __m512 a[NR][NC];
  for (int r = 0; r < NR; ++r) {
    for (int c = 0; c < NC; ++c) a[r][c] = _mm512_loadu_ps(acc + r * hd + 16 * c);
  }
  for (int64_t p = 0; p < pairs; ++p) {
    __m512bh xv[NC];
    for (int c = 0; c < NC; ++c) xv[c] = (__m512bh)_mm512_loadu_si512(vp + p * hd + 16 * c);
    for (int r = 0; r < NR; ++r) {
      const __m512bh w =
          (__m512bh)_mm512_set1_epi32(static_cast<int32_t>(pp[r * (kBlockKeys / 2) + p]));
      for (int c = 0; c < NC; ++c) a[r][c] = _mm512_dpbf16_ps(a[r][c], w, xv[c]);
    }
  }
  for (int r = 0; r < NR; ++r) {
    for (int c = 0; c < NC; ++c) _mm512_storeu_ps(acc + r * hd + 16 * c, a[r][c]);
  }
}
constexpr int kPairRows = 6;  // 6 x 4 accumulators + 4 operands + a broadcast of 32 zmm
template <int NR = kPairRows>
void QkPairs(const uint32_t* qp, int64_t rows, int64_t qld, const uint32_t* kt, int64_t pairs,
             float* s) {
  if constexpr (NR > 1) {
    for (; rows >= NR; rows -= NR, qp += NR * qld, s += NR * kBlockKeys) {
      QkPairsRows<NR>(qp, qld, kt, pairs, s);
    }
    if (rows > 0) QkPairs<NR - 1>(qp, rows, qld, kt, pairs, s);
  } else {
    for (; rows > 0; --rows, qp += qld, s += kBlockKeys) QkPairsRows<1>(qp, qld, kt, pairs, s);
  }
}
template <int NR, int NC = 4>
void PvPairsCols(const uint32_t* pp, const uint32_t* vp, int64_t hd, int64_t pairs, float* acc,
                 int64_t vecs) {
  for (; vecs >= NC; vecs -= NC, vp += 16 * NC, acc += 16 * NC) {
    PvPairsRows<NR, NC>(pp, vp, hd, pairs, acc);
  }
  if constexpr (NC > 1) {
    if (vecs > 0) PvPairsCols<NR, NC - 1>(pp, vp, hd, pairs, acc, vecs);
  }
}
template <int NR = kPairRows>
void PvPairs(const uint32_t* pp, int64_t rows, const uint32_t* vp, int64_t hd, int64_t pairs,
             float* acc) {
  if constexpr (NR > 1) {
    for (; rows >= NR; rows -= NR, pp += NR * (kBlockKeys / 2), acc += NR * hd) {
      PvPairsCols<NR>(pp, vp, hd, pairs, acc, hd / 16);
    }
    if (rows > 0) PvPairs<NR - 1>(pp, rows, vp, hd, pairs, acc);
  } else {
    for (; rows > 0; --rows, pp += kBlockKeys / 2, acc += hd) {
      PvPairsCols<1>(pp, vp, hd, pairs, acc, hd / 16);
    }
  }
}
// Rows of P (kBlockKeys floats, the first nk real) as bf16 pairs, zero past nk.
CCTUNE_TARGET_AVX512BF16 void PackPRows(const float* s, int64_t rows, int64_t nk,
                                        uint32_t* pp) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* sr = s + r * kBlockKeys;
    for (int64_t j = 0; j < kBlockKeys; j += 32) {
      const __mmask16 lo = static_cast<__mmask16>(
          nk - j >= 16 ? 0xffffu : nk - j <= 0 ? 0u : (1u << (nk - j)) - 1u);
      const __mmask16 hi = static_cast<__mmask16>(
          nk - j >= 32 ? 0xffffu : nk - j <= 16 ? 0u : (1u << (nk - j - 16)) - 1u);
      const __m512bh w = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, sr + j + 16),
                                             _mm512_maskz_loadu_ps(lo, sr + j));
      _mm512_storeu_si512(pp + r * (kBlockKeys / 2) + j / 2, (__m512i)w);
    }
  }
}

// Runs the online softmax of one unit over keys [j0, j1): query positions [i0, i1) of all g
// heads of kv head `kvh` in batch `bi`. Leaves the running max, sum and unnormalised
// accumulator of row r = hg * (i1 - i0) + (i - i0) in sc.m, sc.l, sc.acc.
void RunUnit(const Args& a, int64_t bi, int64_t kvh, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
             Scratch& sc) {
  const int64_t hd = a.hd, t = i1 - i0, rows = a.g * t;
  float* qf = sc.q.data();
  float* acc = sc.acc.data();
  float* s = sc.s.data();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t h = kvh * a.g + r / t, i = i0 + r % t;
    const int64_t off = bi * a.qs[0] + h * a.qs[1] + i * a.qs[2];
    float* qr = qf + r * hd;
    LoadF32(ElemAddr(a.q, a.qt, off), a.qt, a.qs[3], hd, qr);
    for (int64_t d = 0; d < hd; ++d) qr[d] *= a.scale;
    sc.m[r] = kNegInf;
    sc.l[r] = 0.f;
  }
  std::fill(acc, acc + rows * hd, 0.f);
  const bool pairs = a.kt_pairs != nullptr;
  if (pairs) {  // the scaled queries as bf16 pairs
    for (int64_t r = 0; r < rows; ++r) {
      const float* qr = qf + r * hd;
      uint32_t* qp = sc.qpairs.data() + r * (hd / 2);
      for (int64_t e = 0; e < hd / 2; ++e) {
        qp[e] = static_cast<uint32_t>(FloatToBf16(qr[2 * e]).bits) |
                static_cast<uint32_t>(FloatToBf16(qr[2 * e + 1]).bits) << 16;
      }
    }
  }
  // Keys past the last row's causal position are masked for every row of the tile.
  const int64_t shift = a.s_kv - a.s_q;  // absolute position of query i is shift + i
  int64_t j_end = j1;
  if (a.causal) j_end = std::min(j_end, shift + i1);
  if (j_end <= j0) return;
  const void* kbase = ElemAddr(a.k, a.kt, bi * a.ks[0] + kvh * a.ks[1]);
  const void* vbase = ElemAddr(a.v, a.vt, bi * a.vs[0] + kvh * a.vs[1]);
  for (int64_t jb = j0; jb < j_end; jb += kBlockKeys) {
    const int64_t nk = std::min(kBlockKeys, j_end - jb);
    const float** kp = sc.kp.data();
    // Scores S[r, j] = (scale q_r) . k_j: in registers against the transposed K, or one GEMM
    // for the tile when it has enough rows (kernels/cpu/gemm; inside this OpenMP region it
    // runs on this thread), else dot products.
    const bool regs = rows >= kMinGemmRows && a.kt_all != nullptr;
    const bool gemm = pairs || regs ||
                      (rows >= kMinGemmRows && hd >= kMinGemmHeadDim && !a.single_row_units);
    const int64_t block = (bi * a.n_kv + kvh) * a.kv_blocks + jb / kBlockKeys;
    if (pairs) {
      QkPairs(sc.qpairs.data(), rows, hd / 2, a.kt_pairs + block * (hd / 2) * kBlockKeys, hd / 2,
              s);
    } else if (regs) {
      tiles::RowsTimesCols(qf, rows, hd, a.kt_all + (bi * a.n_kv + kvh) * hd * a.kt_ld + jb * hd,
                           kBlockKeys, hd, nk, s, kBlockKeys);
    } else {
      BlockRows(kbase, a.kt, a.ks[2], a.ks[3], jb, nk, hd, sc.kbuf.data(), kp);
      if (gemm && RowsLd(kp, nk, hd) >= hd) {
        GemmNT(rows, nk, hd, qf, hd, kp[0], DType::kF32, RowsLd(kp, nk, hd), s, kBlockKeys,
               0.f);
      } else {
        for (int64_t r = 0; r < rows; ++r) {
          const float* qr = qf + r * hd;
          float* sr = s + r * kBlockKeys;
          int64_t j = 0;
          for (; j + 4 <= nk; j += 4) {
            Dot4(qr, kp[j], kp[j + 1], kp[j + 2], kp[j + 3], hd, sr + j);
          }
          for (; j < nk; ++j) sr[j] = Dot(qr, kp[j], hd);
        }
      }
    }
    // Masks, then the online-softmax update; P overwrites S.
    bool any = false;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = i0 + r % t;
      float* sr = s + r * kBlockKeys;
      if (a.causal) {
        const int64_t first_masked = shift + i + 1 - jb;  // keys jb + j with j >= this
        for (int64_t j = std::max<int64_t>(first_masked, 0); j < nk; ++j) sr[j] = kNegInf;
      }
      if (a.mask != nullptr) {
        const uint8_t* mr = a.mask + bi * a.ms[0] + i * a.ms[1] + jb * a.ms[2];
        // This row's bytes of the next key block: the mask ([s_q, s_kv] bytes, 3.6 MB at 1,906
        // tokens) comes from L3, and its loads stalled the softmax (perf: ~1.5% of a 2k-token
        // prefill on the first compare).
        if (jb + kBlockKeys < j_end) __builtin_prefetch(mr + kBlockKeys * a.ms[2]);
        for (int64_t j = 0; j < nk; ++j) {
          if (!mr[j * a.ms[2]]) sr[j] = kNegInf;
        }
      }
      // The block's max; the comparison skips NaN as std::fmax does, inline (fmax is a library
      // call), in 16 independent lanes first (one chain of scalar maxes cost a fifth of the
      // forward), which gives the same max.
      float bm = kNegInf;
      int64_t j = 0;
      if (nk >= kLanes) {
        V16 mv = V16{} + kNegInf;  // all -inf (a NaN must not seed a lane)
        for (; j + kLanes <= nk; j += kLanes) {
          const V16 x = LoadV(sr + j);
          mv = x > mv ? x : mv;
        }
        bm = tiles::MaxLanes(mv);  // (no lane is NaN)
      }
      for (; j < nk; ++j) bm = sr[j] > bm ? sr[j] : bm;
      sc.active[r] = bm != kNegInf;
      if (!sc.active[r]) {  // nothing allowed for this row in this block
        if (gemm) std::fill(sr, sr + nk, 0.f);  // adds nothing in the PV GEMM
        continue;
      }
      any = true;
      const float m_new = std::max(sc.m[r], bm);
      // A row's first allowed block has nothing to correct (l and acc are 0): no scalar exp,
      // whose latency showed in short rows (the same values either way).
      const bool first = sc.m[r] == kNegInf;
      const float corr = first ? 0.f : FastExp(sc.m[r] - m_new);
#pragma omp simd
      for (int64_t j = 0; j < nk; ++j) sr[j] = FastExp(sr[j] - m_new);
      // Their sum: 16 lanes, then a tree (the simd reduction's epilogue was 16 scalar adds in
      // a chain, per row and block).
      float sum = 0.f;
      int64_t e = 0;
      if (nk >= kLanes) {
        V16 sv = LoadV(sr);
        for (e = kLanes; e + kLanes <= nk; e += kLanes) sv += LoadV(sr + e);
        sum = tiles::SumLanes(sv);
      }
      for (; e < nk; ++e) sum += sr[e];
      sc.l[r] = first ? sum : sc.l[r] * corr + sum;
      sc.m[r] = m_new;
      if (!first && corr != 1.f) {
        float* ar = acc + r * hd;
        for (int64_t d = 0; d < hd; ++d) ar[d] *= corr;
      }
    }
    if (!any) continue;
    if (pairs) {
      // acc [rows, hd] += P [rows, nk] · V [nk, hd] (P is 0 on the inactive rows and past nk).
      PackPRows(s, rows, nk, sc.ppairs.data());
      PvPairs(sc.ppairs.data(), rows, a.v_pairs + block * (kBlockKeys / 2) * hd, hd,
              (nk + 1) / 2, acc);
      continue;
    }
    const float** vp = sc.vp.data();
    BlockRows(vbase, a.vt, a.vs[2], a.vs[3], jb, nk, hd, sc.vbuf.data(), vp);
    if (regs) {
      // acc [rows, hd] += P [rows, nk] · V [nk, hd] (P is 0 on the inactive rows).
      tiles::WeightedRowSums(s, kBlockKeys, 1, nk, vp[0], RowsLd(vp, nk, hd), acc, hd, rows,
                             hd / kLanes);
      continue;
    }
    if (gemm && RowsLd(vp, nk, hd) >= hd) {
      // acc [rows, hd] += P [rows, nk] · V [nk, hd] (P is 0 on the inactive rows).
      SgemmStrided(false, false, rows, hd, nk, s, kBlockKeys, vp[0], RowsLd(vp, nk, hd), acc, hd,
                   1.f);
      continue;
    }
    // acc_r += sum_j P[r, j] v_j, four keys per pass over acc_r.
    for (int64_t r = 0; r < rows; ++r) {
      const float* pr = s + r * kBlockKeys;
      if (!sc.active[r]) continue;
      float* ar = acc + r * hd;
      int64_t j = 0;
      for (; j + 4 <= nk; j += 4) {
        const float p0 = pr[j], p1 = pr[j + 1], p2 = pr[j + 2], p3 = pr[j + 3];
        const float *v0 = vp[j], *v1 = vp[j + 1], *v2 = vp[j + 2], *v3 = vp[j + 3];
#pragma omp simd
        for (int64_t d = 0; d < hd; ++d) {
          ar[d] += p0 * v0[d] + p1 * v1[d] + p2 * v2[d] + p3 * v3[d];
        }
      }
      for (; j < nk; ++j) {
        const float pj = pr[j];
        const float* vj = vp[j];
#pragma omp simd
        for (int64_t d = 0; d < hd; ++d) ar[d] += pj * vj[d];
      }
    }
  }
}

// Writes out rows of a unit from (m, l, acc): acc / l, or zeros where nothing was allowed; and
// lse = m + log(l) (-inf where nothing was allowed) when wanted.
void WriteUnit(const Args& a, int64_t bi, int64_t kvh, int64_t i0, int64_t i1, const float* m,
               const float* l, float* acc) {
  const int64_t hd = a.hd, t = i1 - i0, rows = a.g * t;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t h = kvh * a.g + r / t, i = i0 + r % t;
    float* ar = acc + r * hd;
    if (l[r] == 0.f) {  // the mask allowed no key: zeros
      std::fill(ar, ar + hd, 0.f);
    } else {
      const float inv = 1.f / l[r];
      for (int64_t d = 0; d < hd; ++d) ar[d] *= inv;
    }
    const int64_t off = bi * a.os[0] + h * a.os[1] + i * a.os[2];
    StoreF32(ar, ElemAddr(a.out, a.ot, off), a.ot, a.os[3], hd);
    if (a.lse != nullptr) {
      const float row_lse = l[r] == 0.f ? kNegInf : m[r] + std::log(l[r]);
      a.lse[bi * a.ls[0] + h * a.ls[1] + i * a.ls[2]] = row_lse;
    }
  }
}


absl::Status AttentionImpl(Tensor& out, Tensor* lse, const Tensor& q, const Tensor& k,
                           const Tensor& v, const ops::AttentionOptions& options) {
  Args a;
  a.b = q.size(0);
  a.n_h = q.size(1);
  a.s_q = q.size(2);
  a.hd = q.size(3);
  a.n_kv = k.size(1);
  a.s_kv = k.size(2);
  if (a.b == 0 || a.n_h == 0 || a.s_q == 0 || a.hd == 0) return absl::OkStatus();
  a.g = a.n_h / a.n_kv;
  a.scale = options.scale != 0.f ? options.scale : 1.0f / std::sqrt(static_cast<float>(a.hd));
  a.causal = options.causal;
  a.q = q.raw_data();
  a.k = k.raw_data();
  a.v = v.raw_data();
  a.out = out.raw_data();
  a.qt = q.dtype();
  a.kt = k.dtype();
  a.vt = v.dtype();
  a.ot = out.dtype();
  for (int d = 0; d < 4; ++d) {
    a.qs[d] = q.stride(d);
    a.ks[d] = k.stride(d);
    a.vs[d] = v.stride(d);
    a.os[d] = out.stride(d);
  }
  a.mask = nullptr;
  if (options.mask != nullptr) {
    a.mask = static_cast<const uint8_t*>(options.mask->raw_data());
    for (int d = 0; d < 3; ++d) a.ms[d] = options.mask->stride(d);
  }
  a.lse = nullptr;
  a.single_row_units = a.s_q == 1;  // the decode path below
  if (lse != nullptr) {
    a.lse = lse->data<float>();
    for (int d = 0; d < 3; ++d) a.ls[d] = lse->stride(d);
  }

  // Units: (batch, kv head, tile of positions) with all g heads of the group.
  const int64_t tile = std::clamp<int64_t>(kTileRows / a.g, 1, a.s_q);
  const int64_t tiles = (a.s_q + tile - 1) / tile;
  const int64_t units = a.b * a.n_kv * tiles;
  const int64_t threads = MaxThreads();
  int64_t splits = 1;
  if (units < threads && a.s_kv >= 2 * kMinSplitKeys) {
    splits = std::min((threads + units - 1) / units, a.s_kv / kMinSplitKeys);
  }
  int64_t split_len = a.s_kv;
  if (splits > 1) {  // whole key blocks per split
    split_len = (a.s_kv + splits - 1) / splits;
    split_len = (split_len + kBlockKeys - 1) / kBlockKeys * kBlockKeys;
    splits = (a.s_kv + split_len - 1) / split_len;
  }
  const int64_t max_rows = a.g * tile;
  const int64_t hd = a.hd;

  // The bf16 route's K and V pairs (see Args), or the register kernels' transposed K (see
  // kMaxTransposedKeys), for tiles that take them.
  std::vector<uint32_t> pair_buf;
  const int64_t kv_blocks = (a.s_kv + kBlockKeys - 1) / kBlockKeys;
  const bool bf16_pairs =
      lse == nullptr && Bf16PairsRoute(a.b, a.n_h, a.n_kv, a.s_q, a.s_kv, hd, a.kt, a.vt);
  if (bf16_pairs) {
    const int64_t heads = a.b * a.n_kv, block_words = kBlockKeys / 2 * hd;
    pair_buf.resize(static_cast<size_t>(2 * heads * kv_blocks * block_words));
    uint32_t* kt = pair_buf.data();
    uint32_t* vt = kt + heads * kv_blocks * block_words;
#pragma omp parallel for schedule(static) if (heads * kv_blocks > 1 && a.s_kv * hd >= (1 << 13))
    for (int64_t w = 0; w < heads * kv_blocks; ++w) {
      const int64_t u = w / kv_blocks, blk = w % kv_blocks;
      const int64_t bi = u / a.n_kv, kvh = u % a.n_kv;
      uint32_t* kd = kt + w * block_words;  // [hd / 2][kBlockKeys]
      uint32_t* vd = vt + w * block_words;  // [kBlockKeys / 2][hd]
      std::fill(kd, kd + block_words, 0u);
      std::fill(vd, vd + block_words, 0u);
      const int64_t nk = std::min(kBlockKeys, a.s_kv - blk * kBlockKeys);
      const auto key_row = [&](const void* base, DType t, const int64_t* st, int64_t jj) {
        return reinterpret_cast<const uint16_t*>(
            ElemAddr(base, t, bi * st[0] + kvh * st[1] + (blk * kBlockKeys + jj) * st[2]));
      };
      for (int64_t jj = 0; jj < nk; ++jj) {
        const uint16_t* kr = key_row(a.k, a.kt, a.ks, jj);
        for (int64_t e = 0; e < hd / 2; ++e) {
          kd[e * kBlockKeys + jj] = static_cast<uint32_t>(kr[2 * e * a.ks[3]]) |
                                    static_cast<uint32_t>(kr[(2 * e + 1) * a.ks[3]]) << 16;
        }
      }
      for (int64_t jp = 0; 2 * jp < nk; ++jp) {
        const uint16_t* v0 = key_row(a.v, a.vt, a.vs, 2 * jp);
        const uint16_t* v1 = 2 * jp + 1 < nk ? key_row(a.v, a.vt, a.vs, 2 * jp + 1) : nullptr;
        uint32_t* vw = vd + jp * hd;
        for (int64_t d = 0; d < hd; ++d) {
          vw[d] = static_cast<uint32_t>(v0[d * a.vs[3]]) |
                  (v1 != nullptr ? static_cast<uint32_t>(v1[d * a.vs[3]]) << 16 : 0u);
        }
      }
    }
    a.kt_pairs = kt;
    a.v_pairs = vt;
    a.kv_blocks = kv_blocks;
  }
  FloatBuffer kt_buf;
  const int64_t kt_ld = (a.s_kv + kBlockKeys - 1) / kBlockKeys * kBlockKeys;
  if (!bf16_pairs && !a.single_row_units && max_rows >= kMinGemmRows && hd >= kMinGemmHeadDim &&
      hd % kLanes == 0 && a.b * a.n_kv * hd * kt_ld <= kMaxTransposedKeys) {
    kt_buf.Resize(a.b * a.n_kv * hd * kt_ld);
    float* kt = kt_buf.data();
    const int64_t heads = a.b * a.n_kv;
#pragma omp parallel if (heads > 1 && heads * hd * kt_ld >= (1 << 15))
    {
      FloatBuffer row(hd);
#pragma omp for schedule(static)
      for (int64_t u = 0; u < heads; ++u) {
        const int64_t bi = u / a.n_kv, kvh = u % a.n_kv;
        float* dst = kt + u * hd * kt_ld;
        for (int64_t j = 0; j < a.s_kv; ++j) {
          const int64_t off = bi * a.ks[0] + kvh * a.ks[1] + j * a.ks[2];
          const float* kr = LoadF32Or(ElemAddr(a.k, a.kt, off), a.kt, a.ks[3], hd, row.data());
          float* blk = dst + (j / kBlockKeys) * hd * kBlockKeys + j % kBlockKeys;
          for (int64_t e = 0; e < hd; ++e) blk[e * kBlockKeys] = kr[e];
        }
        if (a.s_kv % kBlockKeys != 0) {  // the last block's keys past s_kv
          float* blk = dst + (a.s_kv / kBlockKeys) * hd * kBlockKeys;
          for (int64_t e = 0; e < hd; ++e) {
            std::fill(blk + e * kBlockKeys + a.s_kv % kBlockKeys, blk + (e + 1) * kBlockKeys, 0.f);
          }
        }
      }
    }
    a.kt_all = kt;
    a.kt_ld = kt_ld;
  }

  if (splits == 1) {
    // Small problems (a tiny model's decode step) run on one thread: waking the team costs
    // more than the work.
    const bool parallel = units > 1 && a.n_kv * a.g * a.s_q * a.s_kv * hd * a.b >= (1 << 15);
    auto run_unit = [&](int64_t u, Scratch& sc) {
      const int64_t tt = u % tiles, kvh = (u / tiles) % a.n_kv, bi = u / (tiles * a.n_kv);
      const int64_t i0 = tt * tile, i1 = std::min(a.s_q, i0 + tile);
      RunUnit(a, bi, kvh, i0, i1, 0, a.s_kv, sc);
      WriteUnit(a, bi, kvh, i0, i1, sc.m.data(), sc.l.data(), sc.acc.data());
    };
    if (a.s_q == 1) {
      // Decode: equal units on the decode thread pool (the GEMVs around it run there too, so
      // no OpenMP team spins beside it), each participant with a scratch kept between calls.
      auto task = [&](int t, int nt) {
        thread_local Scratch sc;
        sc.Reserve(max_rows, hd);
        for (int64_t u = units * t / nt; u < units * (t + 1) / nt; ++u) run_unit(u, sc);
      };
      ThreadPool& pool = ThreadPool::Default();
      if (parallel) {
        pool.Run(static_cast<int>(std::min<int64_t>(units, pool.num_threads())), task);
      } else {
        task(0, 1);
      }
      return absl::OkStatus();
    }
#pragma omp parallel if (parallel)
    {
      Scratch sc;
      sc.Reserve(max_rows, hd);
#pragma omp for schedule(dynamic, 1)
      for (int64_t u = 0; u < units; ++u) run_unit(u, sc);
    }
    return absl::OkStatus();
  }

  // Split keys: each (unit, split) leaves (m, l, acc) partials; then they are merged.
  const int64_t part = max_rows * (hd + 2);
  FloatBuffer partials(units * splits * part);
  float* pbase = partials.data();
#pragma omp parallel
  {
    Scratch sc;
    sc.Reserve(max_rows, hd);
#pragma omp for schedule(dynamic, 1)
    for (int64_t w = 0; w < units * splits; ++w) {
      const int64_t u = w / splits, sp = w % splits;
      const int64_t tt = u % tiles, kvh = (u / tiles) % a.n_kv, bi = u / (tiles * a.n_kv);
      const int64_t i0 = tt * tile, i1 = std::min(a.s_q, i0 + tile);
      const int64_t rows = a.g * (i1 - i0);
      const int64_t j0 = sp * split_len, j1 = std::min(a.s_kv, j0 + split_len);
      RunUnit(a, bi, kvh, i0, i1, j0, j1, sc);
      float* p = pbase + w * part;
      std::copy(sc.m.begin(), sc.m.begin() + rows, p);
      std::copy(sc.l.begin(), sc.l.begin() + rows, p + max_rows);
      std::copy(sc.acc.data(), sc.acc.data() + rows * hd, p + 2 * max_rows);
    }
#pragma omp for schedule(static)
    for (int64_t u = 0; u < units; ++u) {
      const int64_t tt = u % tiles, kvh = (u / tiles) % a.n_kv, bi = u / (tiles * a.n_kv);
      const int64_t i0 = tt * tile, i1 = std::min(a.s_q, i0 + tile);
      const int64_t rows = a.g * (i1 - i0);
      float* acc = sc.acc.data();
      float* l = sc.l.data();
      for (int64_t r = 0; r < rows; ++r) {
        float mx = kNegInf;
        for (int64_t sp = 0; sp < splits; ++sp) {
          mx = std::fmax(mx, pbase[(u * splits + sp) * part + r]);
        }
        sc.m[r] = mx;
        float* ar = acc + r * hd;
        std::fill(ar, ar + hd, 0.f);
        l[r] = 0.f;
        if (mx == kNegInf) continue;
        for (int64_t sp = 0; sp < splits; ++sp) {
          const float* p = pbase + (u * splits + sp) * part;
          if (p[r] == kNegInf) continue;
          const float f = FastExp(p[r] - mx);
          l[r] += f * p[max_rows + r];
          const float* pa = p + 2 * max_rows + r * hd;
          for (int64_t d = 0; d < hd; ++d) ar[d] += f * pa[d];
        }
      }
      WriteUnit(a, bi, kvh, i0, i1, sc.m.data(), l, acc);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Attention(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                       const ops::AttentionOptions& options) {
  return AttentionImpl(out, nullptr, q, k, v, options);
}

absl::Status AttentionWithLse(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k,
                              const Tensor& v, const ops::AttentionOptions& options) {
  return AttentionImpl(out, &lse, q, k, v, options);
}

bool AttentionRoundsToBf16(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) return false;
  return Bf16PairsRoute(q.size(0), q.size(1), k.size(1), q.size(2), k.size(2), q.size(3),
                        k.dtype(), v.dtype());
}

}  // namespace cpu
}  // namespace cctune
