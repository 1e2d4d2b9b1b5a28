#include "kernels/cpu/attention_backward.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/attention_tiles.h"
#include "kernels/cpu/cpu_util.h"

namespace cctune {
namespace cpu {
namespace {

constexpr int64_t kTileRows = 32;  // query rows per tile (a dq unit; the dk/dv pass steps)
constexpr int64_t kMaxKeyBlock = 64;
constexpr int64_t kMinKeyBlock = 16;
// The dk/dv pass keeps every dS_ij for the dq pass when they fit in this many floats (64 MiB),
// which saves the dq pass recomputing the scores; longer sequences recompute them.
constexpr int64_t kMaxStoredScores = int64_t{1} << 24;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// A 4-d tensor as f32 rows with a unit last-dim stride: its own memory when it already is,
// else a contiguous f32 copy in `scratch`.
struct F32Rows {
  const float* p;
  int64_t s0, s1, s2;
  const float* Row(int64_t i0, int64_t i1, int64_t i2) const {
    return p + i0 * s0 + i1 * s1 + i2 * s2;
  }
};

F32Rows AsF32Rows(const Tensor& t, FloatBuffer& scratch) {
  if (t.dtype() == DType::kF32 && (t.stride(3) == 1 || t.size(3) <= 1)) {
    return {t.data<float>(), t.stride(0), t.stride(1), t.stride(2)};
  }
  const int64_t n1 = t.size(1), n2 = t.size(2), hd = t.size(3);
  scratch.Resize(t.numel());
  const RowIndexer rows(t.strided_view());
  const DType dt = t.dtype();
  const void* base = t.raw_data();
  float* dst = scratch.data();
#pragma omp parallel for schedule(static) if (t.numel() >= (1 << 15))
  for (int64_t r = 0; r < rows.rows(); ++r) {
    LoadF32(ElemAddr(base, dt, rows.Offset(r)), dt, rows.inner_stride(), hd, dst + r * hd);
  }
  return {dst, n1 * n2 * hd, n2 * hd, hd};
}

// A 4-d f32 gradient to accumulate into: its own memory when its last-dim stride is 1, else
// a zeroed contiguous buffer added into it by Finish().
class GradRows {
 public:
  explicit GradRows(Tensor& t) : t_(t) {
    if (t.stride(3) == 1 || t.size(3) <= 1) {
      p_ = t.data<float>();
      s0_ = t.stride(0);
      s1_ = t.stride(1);
      s2_ = t.stride(2);
      return;
    }
    buf_.Resize(t.numel());
    p_ = buf_.data();
    std::fill(p_, p_ + t.numel(), 0.f);
    s2_ = t.size(3);
    s1_ = t.size(2) * s2_;
    s0_ = t.size(1) * s1_;
  }
  float* Row(int64_t i0, int64_t i1, int64_t i2) const {
    return p_ + i0 * s0_ + i1 * s1_ + i2 * s2_;
  }
  void Finish() {
    if (p_ == buf_.data()) AccumulateRows(t_, p_, t_.size(3));
  }

 private:
  Tensor& t_;
  FloatBuffer buf_;
  float* p_ = nullptr;
  int64_t s0_ = 0, s1_ = 0, s2_ = 0;
};

inline float Dot(const float* a, const float* b, int64_t n) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t d = 0; d < n; ++d) s += a[d] * b[d];
  return s;
}

inline void Axpy(float alpha, const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t d = 0; d < n; ++d) y[d] += alpha * x[d];
}

struct Problem {
  int64_t b, n_h, n_kv, g, s_q, s_kv, hd, shift;
  float scale;
  bool causal;
  const uint8_t* mask;  // null: none
  int64_t ms0, ms1, ms2;
  F32Rows q, k, v, dy;

  // The last key (exclusive) query position i may see under the causal rule.
  int64_t KeyEnd(int64_t i) const { return causal ? std::min(s_kv, shift + i + 1) : s_kv; }
  // The mask row of (bi, i), or null.
  const uint8_t* MaskRow(int64_t bi, int64_t i) const {
    return mask == nullptr ? nullptr : mask + bi * ms0 + i * ms1;
  }
};

// lse of row (bi, h, i) over keys [0, KeyEnd(i)); qs = scale · q_i; s: s_kv floats of scratch.
float RowLse(const Problem& pr, int64_t bi, int64_t h, int64_t i, const float* qs, float* s) {
  const int64_t kvh = h / pr.g, j_end = pr.KeyEnd(i);
  const uint8_t* mrow = pr.MaskRow(bi, i);
  float mx = kNegInf;
  for (int64_t j = 0; j < j_end; ++j) {
    s[j] = (mrow != nullptr && !mrow[j * pr.ms2]) ? kNegInf : Dot(qs, pr.k.Row(bi, kvh, j), pr.hd);
    mx = std::fmax(mx, s[j]);
  }
  if (mx == kNegInf) return kNegInf;
  float sum = 0.f;
  for (int64_t j = 0; j < j_end; ++j) sum += FastExp(s[j] - mx);
  return mx + std::log(sum);
}

// D of row (bi, h, i) = sum_j P_ij (dy_i · v_j), for a row with finite lse.
float RowD(const Problem& pr, int64_t bi, int64_t h, int64_t i, const float* qs, float lse) {
  const int64_t kvh = h / pr.g, j_end = pr.KeyEnd(i);
  const uint8_t* mrow = pr.MaskRow(bi, i);
  const float* g = pr.dy.Row(bi, h, i);
  float d = 0.f;
  for (int64_t j = 0; j < j_end; ++j) {
    if (mrow != nullptr && !mrow[j * pr.ms2]) continue;
    const float p = FastExp(Dot(qs, pr.k.Row(bi, kvh, j), pr.hd) - lse);
    d += p * Dot(g, pr.v.Row(bi, kvh, j), pr.hd);
  }
  return d;
}

using tiles::kLanes;
using tiles::WeightedRowSums;
static_assert(kMaxKeyBlock == tiles::kMaxTileCols, "a key block is one register tile of columns");

// One block of up to kMaxKeyBlock keys of a kv head and one tile of up to kTileRows query
// rows of a head: the block's keys and values transposed ([h_d][kMaxKeyBlock], zero past the
// block's keys) so that a row's scores are vertical multiply-adds, its keys as rows padded to
// hdp = h_d rounded up to whole vectors, the tile's scaled q and dy rows (padded the same
// way), and the tile's P and dS = P·(dP - D) ([rows][kMaxKeyBlock], 0 where masked or past
// the row's last visible key).
struct TileScratch {
  int64_t hd, hdp;
  FloatBuffer kt, vt, kr, qs, g, p, ds;
  explicit TileScratch(int64_t head_dim)
      : hd(head_dim),
        hdp((head_dim + kLanes - 1) / kLanes * kLanes),
        kt(head_dim * kMaxKeyBlock),
        vt(head_dim * kMaxKeyBlock),
        kr(kMaxKeyBlock * hdp),
        qs(kTileRows * hdp),
        g(kTileRows * hdp),
        p(kTileRows * kMaxKeyBlock),
        ds(kTileRows * kMaxKeyBlock) {
    std::fill(qs.data(), qs.data() + kTileRows * hdp, 0.f);
    std::fill(g.data(), g.data() + kTileRows * hdp, 0.f);
    std::fill(kr.data(), kr.data() + kMaxKeyBlock * hdp, 0.f);
  }
  // Keys [j0, j0 + nk) of (bi, kvh).
  void LoadKeys(const Problem& pr, int64_t bi, int64_t kvh, int64_t j0, int64_t nk) {
    float* kp = kt.data();
    float* vp = vt.data();
    std::fill(kp, kp + hd * kMaxKeyBlock, 0.f);
    std::fill(vp, vp + hd * kMaxKeyBlock, 0.f);
    for (int64_t j = 0; j < nk; ++j) {
      const float* krow = pr.k.Row(bi, kvh, j0 + j);
      const float* vrow = pr.v.Row(bi, kvh, j0 + j);
      for (int64_t e = 0; e < hd; ++e) {
        kp[e * kMaxKeyBlock + j] = krow[e];
        vp[e * kMaxKeyBlock + j] = vrow[e];
      }
      std::copy(krow, krow + hd, kr.data() + j * hdp);
    }
  }
  // Keys [j0, j0 + nk) of (bi, kvh) as padded rows only (kr).
  void LoadKeyRows(const Problem& pr, int64_t bi, int64_t kvh, int64_t j0, int64_t nk) {
    for (int64_t j = 0; j < nk; ++j) {
      const float* krow = pr.k.Row(bi, kvh, j0 + j);
      std::copy(krow, krow + hd, kr.data() + j * hdp);
    }
  }
  // Query rows [i0, i0 + rows) of (bi, h): q scaled, and dy.
  void LoadRows(const Problem& pr, int64_t bi, int64_t h, int64_t i0, int64_t rows) {
    for (int64_t t = 0; t < rows; ++t) {
      const float* qr = pr.q.Row(bi, h, i0 + t);
      const float* gr = pr.dy.Row(bi, h, i0 + t);
      float* qd = qs.data() + t * hdp;
      for (int64_t e = 0; e < hd; ++e) qd[e] = pr.scale * qr[e];
      std::copy(gr, gr + hd, g.data() + t * hdp);
    }
  }
  // P and dS of the loaded rows (query rows i0...) against the loaded keys (from key j0).
  void Grads(const Problem& pr, int64_t bi, int64_t h, int64_t i0, int64_t rows, int64_t j0,
             int64_t nk, const float* row_lse, const float* row_d) {
    // Only the vectors that hold keys (a short sequence's block is one or two); each column's
    // sums are the same however many are computed. Columns past them are zeroed below.
    const int64_t kc = (nk + kLanes - 1) / kLanes;
    // Scores (into p) and dy·v (into ds) of the loaded rows against the loaded keys.
    tiles::RowsTimesCols(qs.data(), rows, hdp, kt.data(), kMaxKeyBlock, hd, nk, p.data(),
                         kMaxKeyBlock);
    tiles::RowsTimesCols(g.data(), rows, hdp, vt.data(), kMaxKeyBlock, hd, nk, ds.data(),
                         kMaxKeyBlock);
    for (int64_t t = 0; t < rows; ++t) {
      const int64_t i = i0 + t, row = (bi * pr.n_h + h) * pr.s_q + i;
      float* pt = p.data() + t * kMaxKeyBlock;   // holds the scores until overwritten by P
      float* dst = ds.data() + t * kMaxKeyBlock;  // holds dy·v until overwritten by dS
      const float l = row_lse[row], d = row_d[row];
      const int64_t nki = l == kNegInf ? 0 : std::min(j0 + nk, pr.KeyEnd(i)) - j0;
      if (nki <= 0) {
        std::fill(pt, pt + kMaxKeyBlock, 0.f);
        std::fill(dst, dst + kMaxKeyBlock, 0.f);
        continue;
      }
      const uint8_t* mrow = pr.MaskRow(bi, i);
      if (mrow != nullptr) {
        for (int64_t j = 0; j < nki; ++j) {
          if (!mrow[(j0 + j) * pr.ms2]) pt[j] = kNegInf;
        }
      }
      const int64_t kw = kc * kLanes;  // the computed columns
#pragma omp simd
      for (int64_t j = 0; j < kw; ++j) {
        const float pj = FastExp(pt[j] - l);
        pt[j] = pj;
        dst[j] = pj * (dst[j] - d);
      }
      std::fill(pt + nki, pt + kMaxKeyBlock, 0.f);
      std::fill(dst + nki, dst + kMaxKeyBlock, 0.f);
    }
  }
};

}  // namespace

absl::Status AttentionBackward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dy,
                               const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* out,
                               const Tensor* lse, const ops::AttentionOptions& options) {
  Problem pr;
  pr.b = q.size(0);
  pr.n_h = q.size(1);
  pr.s_q = q.size(2);
  pr.hd = q.size(3);
  pr.n_kv = k.size(1);
  pr.s_kv = k.size(2);
  if (pr.b == 0 || pr.n_h == 0 || pr.s_q == 0 || pr.s_kv == 0 || pr.hd == 0) {
    return absl::OkStatus();
  }
  pr.g = pr.n_h / pr.n_kv;
  pr.shift = pr.s_kv - pr.s_q;
  pr.scale = options.scale != 0.f ? options.scale : 1.0f / std::sqrt(static_cast<float>(pr.hd));
  pr.causal = options.causal;
  pr.mask = nullptr;
  if (options.mask != nullptr) {
    pr.mask = static_cast<const uint8_t*>(options.mask->raw_data());
    pr.ms0 = options.mask->stride(0);
    pr.ms1 = options.mask->stride(1);
    pr.ms2 = options.mask->stride(2);
  }
  FloatBuffer q_buf, k_buf, v_buf, dy_buf;
  pr.q = AsF32Rows(q, q_buf);
  pr.k = AsF32Rows(k, k_buf);
  pr.v = AsF32Rows(v, v_buf);
  pr.dy = AsF32Rows(dy, dy_buf);
  const int64_t hd = pr.hd;
  const float scale = pr.scale;

  // ---- Row statistics: lse and D per query row (bi, h, i), row-major. ----
  const int64_t nrows = pr.b * pr.n_h * pr.s_q;
  FloatBuffer lse_buf(nrows), d_buf(nrows);
  float* row_lse = lse_buf.data();
  float* row_d = d_buf.data();
  const DType ot = out != nullptr ? out->dtype() : DType::kF32;
#pragma omp parallel if (nrows * pr.s_kv * hd >= (1 << 14))
  {
    FloatBuffer scratch(pr.s_kv + 2 * hd);
    float* qs = scratch.data();
    float* ob = qs + hd;
    float* s = ob + hd;
#pragma omp for schedule(dynamic, 16)
    for (int64_t r = 0; r < nrows; ++r) {
      const int64_t i = r % pr.s_q, h = (r / pr.s_q) % pr.n_h, bi = r / (pr.s_q * pr.n_h);
      const float* qr = pr.q.Row(bi, h, i);
      for (int64_t e = 0; e < hd; ++e) qs[e] = scale * qr[e];
      row_lse[r] =
          lse != nullptr
              ? lse->data<float>()[bi * lse->stride(0) + h * lse->stride(1) + i * lse->stride(2)]
              : RowLse(pr, bi, h, i, qs, s);
      if (row_lse[r] == kNegInf) {
        row_d[r] = 0.f;
      } else if (out != nullptr) {
        const int64_t off = bi * out->stride(0) + h * out->stride(1) + i * out->stride(2);
        const float* o = LoadF32Or(ElemAddr(out->raw_data(), ot, off), ot, out->stride(3), hd, ob);
        row_d[r] = Dot(pr.dy.Row(bi, h, i), o, hd);
      } else {
        row_d[r] = RowD(pr, bi, h, i, qs, row_lse[r]);
      }
    }
  }

  // dS of every (row, key) the dq pass reads, when small enough to keep (see above).
  FloatBuffer ds_buf;
  float* ds_all = nullptr;
  if (nrows * pr.s_kv <= kMaxStoredScores) {
    ds_buf.Resize(nrows * pr.s_kv);
    ds_all = ds_buf.data();
  }

  // ---- dk, dv: units of (batch, kv head, block of keys) over all rows of the group. ----
  {
    GradRows gk(dk), gv(dv);
    // Blocks small enough to give every thread work, but not below kMinKeyBlock keys. The
    // sums do not depend on the block size.
    const int64_t threads = MaxThreads();
    int64_t kb = kMaxKeyBlock;
    while (kb > kMinKeyBlock && pr.b * pr.n_kv * ((pr.s_kv + kb - 1) / kb) < 2 * threads) kb /= 2;
    const int64_t blocks = (pr.s_kv + kb - 1) / kb;
    const int64_t units = pr.b * pr.n_kv * blocks;
#pragma omp parallel if (units > 1 && nrows * pr.s_kv * hd >= (1 << 14))
    {
      TileScratch ts(hd);
      const int64_t hdp = ts.hdp;
      FloatBuffer acc_buf(2 * kb * hdp);
      float* dk_acc = acc_buf.data();  // [kb, hdp]
      float* dv_acc = dk_acc + kb * hdp;
#pragma omp for schedule(dynamic, 1)
      for (int64_t u = 0; u < units; ++u) {
        const int64_t blk = u % blocks, kvh = (u / blocks) % pr.n_kv, bi = u / (blocks * pr.n_kv);
        const int64_t j0 = blk * kb, j1 = std::min(pr.s_kv, j0 + kb), nb = j1 - j0;
        std::fill(dk_acc, dk_acc + nb * hdp, 0.f);
        std::fill(dv_acc, dv_acc + nb * hdp, 0.f);
        ts.LoadKeys(pr, bi, kvh, j0, nb);
        // Causal: query i sees key j0 only when shift + i >= j0. Tiles start at multiples of
        // kTileRows, so that the stored dS covers every row and key the dq pass reads (rows
        // that see none of the block store zeros).
        const int64_t i_first =
            pr.causal ? std::max<int64_t>(0, j0 - pr.shift) / kTileRows * kTileRows : 0;
        for (int64_t hg = 0; hg < pr.g; ++hg) {
          const int64_t h = kvh * pr.g + hg;
          for (int64_t i0 = i_first; i0 < pr.s_q; i0 += kTileRows) {
            const int64_t rows = std::min(pr.s_q - i0, kTileRows);
            ts.LoadRows(pr, bi, h, i0, rows);
            ts.Grads(pr, bi, h, i0, rows, j0, nb, row_lse, row_d);
            if (ds_all != nullptr) {
              for (int64_t t = 0; t < rows; ++t) {
                const float* src = ts.ds.data() + t * kMaxKeyBlock;
                std::copy(src, src + nb,
                          ds_all + ((bi * pr.n_h + h) * pr.s_q + i0 + t) * pr.s_kv + j0);
              }
            }
            // dv_j += sum_t P_tj dy_t, dk_j += sum_t dS_tj qs_t (rows t in order).
            WeightedRowSums(ts.p.data(), 1, kMaxKeyBlock, rows, ts.g.data(), hdp, dv_acc, hdp,
                            nb, hdp / kLanes);
            WeightedRowSums(ts.ds.data(), 1, kMaxKeyBlock, rows, ts.qs.data(), hdp, dk_acc,
                            hdp, nb, hdp / kLanes);
          }
        }
        for (int64_t j = 0; j < nb; ++j) {
          Axpy(1.f, dk_acc + j * hdp, gk.Row(bi, kvh, j0 + j), hd);
          Axpy(1.f, dv_acc + j * hdp, gv.Row(bi, kvh, j0 + j), hd);
        }
      }
    }
    gk.Finish();
    gv.Finish();
  }

  // ---- dq: units of (batch, head, tile of query positions), after dk/dv. ----
  {
    GradRows gq(dq);
    const int64_t tiles = (pr.s_q + kTileRows - 1) / kTileRows;
    const int64_t units = pr.b * pr.n_h * tiles;
#pragma omp parallel if (units > 1 && nrows * pr.s_kv * hd >= (1 << 14))
    {
      TileScratch ts(hd);
      const int64_t hdp = ts.hdp;
      FloatBuffer acc_buf(kTileRows * hdp);
      float* acc = acc_buf.data();  // [tile, hdp] sum_j dS_ij k_j
#pragma omp for schedule(dynamic, 1)
      for (int64_t u = 0; u < units; ++u) {
        const int64_t tt = u % tiles, h = (u / tiles) % pr.n_h, bi = u / (tiles * pr.n_h);
        const int64_t kvh = h / pr.g;
        const int64_t i0 = tt * kTileRows, i1 = std::min(pr.s_q, i0 + kTileRows);
        const int64_t rows = i1 - i0;
        ts.LoadRows(pr, bi, h, i0, rows);
        std::fill(acc, acc + rows * hdp, 0.f);
        const int64_t j_stop = pr.KeyEnd(i1 - 1);
        for (int64_t jb = 0; jb < j_stop; jb += kMaxKeyBlock) {
          const int64_t nk = std::min(j_stop, jb + kMaxKeyBlock) - jb;
          // acc[t] += sum_j dS_tj k_j, with dS as the dk/dv pass left it or recomputed (the
          // same values either way).
          if (ds_all != nullptr) {
            ts.LoadKeyRows(pr, bi, kvh, jb, nk);
            const float* w = ds_all + ((bi * pr.n_h + h) * pr.s_q + i0) * pr.s_kv + jb;
            WeightedRowSums(w, pr.s_kv, 1, nk, ts.kr.data(), hdp, acc, hdp, rows, hdp / kLanes);
            continue;
          }
          ts.LoadKeys(pr, bi, kvh, jb, nk);
          ts.Grads(pr, bi, h, i0, rows, jb, nk, row_lse, row_d);
          WeightedRowSums(ts.ds.data(), kMaxKeyBlock, 1, nk, ts.kr.data(), hdp, acc, hdp, rows,
                          hdp / kLanes);
        }
        for (int64_t t = 0; t < rows; ++t) Axpy(scale, acc + t * hdp, gq.Row(bi, h, i0 + t), hd);
      }
    }
    gq.Finish();
  }
  return absl::OkStatus();
}

}  // namespace cpu
}  // namespace cctune
