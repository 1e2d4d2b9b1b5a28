#include "kernels/cpu/sampling.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <numeric>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_util.h"

namespace cctune {
namespace cpu {
namespace {

// True when (a, ia) comes before (b, ib): larger first, NaN first, then lower index.
inline bool Before(float a, int64_t ia, float b, int64_t ib) {
  const bool na = std::isnan(a), nb = std::isnan(b);
  if (na != nb) return na;
  if (!na && a != b) return a > b;
  return ia < ib;
}

// First index of the maximum (of the first NaN when there is one).
int64_t ArgmaxRow(const float* x, int64_t v) {
  float mx = -INFINITY;
  int nan = 0;
#pragma omp simd reduction(max : mx) reduction(| : nan)
  for (int64_t i = 0; i < v; ++i) {
    mx = x[i] > mx ? x[i] : mx;
    nan |= x[i] != x[i];
  }
  for (int64_t i = 0; i < v; ++i) {
    if (nan ? x[i] != x[i] : x[i] == mx) return i;
  }
  return 0;  // v == 0 never reaches here (validated)
}

// Puts the first `k` ids of `idx` (a permutation of some ids) in the order above.
void SortFirst(std::vector<int32_t>& idx, int64_t k, const float* x) {
  auto cmp = [x](int32_t a, int32_t b) { return Before(x[a], a, x[b], b); };
  if (k >= static_cast<int64_t>(idx.size())) {
    std::sort(idx.begin(), idx.end(), cmp);
  } else {
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), cmp);
  }
}

}  // namespace

absl::Status Argmax(Tensor& out, const Tensor& x) {
  const RowIndexer xr(x.strided_view());
  const int64_t v = xr.row_length(), rows = xr.rows();
  const StridedView ov = out.strided_view();
  int64_t* op = out.data<int64_t>();
  const DType xt = x.dtype();
  const void* xbase = x.raw_data();
#pragma omp parallel if (rows * v >= (1 << 15))
  {
    FloatBuffer buf(v);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float* xs =
          LoadF32Or(ElemAddr(xbase, xt, xr.Offset(r)), xt, xr.inner_stride(), v, buf.data());
      op[ElementOffset(ov, r)] = ArgmaxRow(xs, v);
    }
  }
  return absl::OkStatus();
}

absl::Status TopK(Tensor& values, Tensor& indices, const Tensor& x, int64_t k) {
  const RowIndexer xr(x.strided_view()), vr(values.strided_view()), ir(indices.strided_view());
  const int64_t v = xr.row_length(), rows = xr.rows();
  const DType xt = x.dtype(), vt = values.dtype();
  const void* xbase = x.raw_data();
  void* vbase = values.raw_data();
  int64_t* ibase = indices.data<int64_t>();
#pragma omp parallel if (rows * v >= (1 << 15))
  {
    FloatBuffer buf(v + k);
    std::vector<int32_t> idx(v);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float* xs =
          LoadF32Or(ElemAddr(xbase, xt, xr.Offset(r)), xt, xr.inner_stride(), v, buf.data());
      std::iota(idx.begin(), idx.end(), 0);
      SortFirst(idx, k, xs);
      float* top = buf.data() + v;
      const int64_t ioff = ir.Offset(r);
      for (int64_t j = 0; j < k; ++j) {
        top[j] = xs[idx[j]];
        ibase[ioff + j * ir.inner_stride()] = idx[j];
      }
      StoreF32(top, ElemAddr(vbase, vt, vr.Offset(r)), vt, vr.inner_stride(), k);
    }
  }
  return absl::OkStatus();
}

namespace {

// The probability order: larger p first, lower id on ties (p holds no NaN here).
struct ByProb {
  const float* p;
  bool operator()(int32_t a, int32_t b) const { return p[a] > p[b] || (p[a] == p[b] && a < b); }
};

// Reorders ids[0, n) so that its first `keep` entries are the shortest prefix, in ByProb order,
// whose probability mass reaches `need` (all n when it never does); returns keep. Expected
// O(n): halves the range with nth_element and sorts only the final few ids.
int64_t NucleusPrefix(int32_t* ids, int64_t n, const float* p, double need) {
  const ByProb cmp{p};
  int64_t lo = 0, hi = n;
  while (hi - lo > 64) {
    const int64_t mid = lo + (hi - lo) / 2;
    std::nth_element(ids + lo, ids + mid, ids + hi, cmp);
    double mass = 0;
    for (int64_t j = lo; j < mid; ++j) mass += p[ids[j]];
    if (mass >= need) {
      hi = mid;
    } else {
      need -= mass;
      lo = mid;
    }
  }
  std::sort(ids + lo, ids + hi, cmp);
  for (int64_t j = lo; j < hi; ++j) {
    need -= p[ids[j]];
    if (need <= 0) return j + 1;
  }
  return hi;
}

}  // namespace

absl::Status Sample(Tensor& out, const Tensor& logits, const ops::SamplingParams& params,
                    Generator& gen) {
  const int64_t b = logits.size(0), v = logits.size(1);
  const bool greedy = params.temperature == 0.f;
  absl::InlinedVector<float, 16> u(greedy ? 0 : b);  // inline: a decode step allocates nothing
  for (float& x : u) x = gen.Uniform();
  const RowIndexer xr(logits.strided_view());
  const DType xt = logits.dtype();
  const void* xbase = logits.raw_data();
  int64_t* op = out.data<int64_t>();
  const int64_t os = out.stride(0);
  const int64_t top_k = params.top_k > 0 ? std::min(params.top_k, v) : v;
  const float temperature = params.temperature;
  const double top_p = params.top_p;
  std::atomic<int64_t> bad_row{-1};
#pragma omp parallel if (b > 1 && b * v >= (1 << 15))
  {
    FloatBuffer buf(v);
    // Per thread, grown and kept: sampling a token allocates no candidate list.
    thread_local std::vector<int32_t> ids;
    thread_local std::vector<uint8_t> kept_mask;
#pragma omp for schedule(dynamic, 1)
    for (int64_t r = 0; r < b; ++r) {
      float* z = buf.data();
      LoadF32(ElemAddr(xbase, xt, xr.Offset(r)), xt, xr.inner_stride(), v, z);
      if (greedy) {
        op[r * os] = ArgmaxRow(z, v);
        continue;
      }
      float zmax = -INFINITY;
      int nan = 0;
#pragma omp simd reduction(max : zmax) reduction(| : nan)
      for (int64_t i = 0; i < v; ++i) {
        if (temperature != 1.f) z[i] /= temperature;
        zmax = z[i] > zmax ? z[i] : zmax;
        nan |= z[i] != z[i];
      }
      if (nan || !std::isfinite(zmax)) {
        int64_t expected = -1;
        bad_row.compare_exchange_strong(expected, r);
        op[r * os] = 0;
        continue;
      }
      // Candidates and their unnormalised probabilities exp(z - max), written over z.
      int64_t n = v;  // candidates: ids[0, n), or every id when n == v and ids is unused
      double total = 0;
      if (top_k < v) {
        ids.resize(v);
        std::iota(ids.begin(), ids.end(), 0);
        std::partial_sort(ids.begin(), ids.begin() + top_k, ids.end(), [z](int32_t a, int32_t c) {
          return z[a] > z[c] || (z[a] == z[c] && a < c);
        });
        n = top_k;
        for (int64_t j = 0; j < n; ++j) total += z[ids[j]] = FastExp(z[ids[j]] - zmax);
      } else {
        constexpr int64_t kChunk = 1024;
        for (int64_t c = 0; c < v; c += kChunk) {
          const int64_t end = std::min(v, c + kChunk);
          float part = 0.f;
#pragma omp simd reduction(+ : part)
          for (int64_t i = c; i < end; ++i) {
            z[i] = FastExp(z[i] - zmax);
            part += z[i];
          }
          total += part;
        }
      }
      // Nucleus: the shortest prefix in probability order reaching top_p of the mass.
      int64_t keep = n;
      if (top_p < 1.0) {
        if (n == v) {
          ids.resize(v);
          std::iota(ids.begin(), ids.end(), 0);
        }
        keep = NucleusPrefix(ids.data(), n, z, top_p * total);
      }
      // Draw over the kept ids in increasing id order.
      double kept_total = 0;
      int64_t choice = -1;
      if (keep == v) {  // every id, already in id order
        for (int64_t i = 0; i < v; ++i) kept_total += z[i];
        const double target = static_cast<double>(u[r]) * kept_total;
        double cum = 0;
        for (int64_t i = 0; i < v; ++i) {
          if (z[i] <= 0.f) continue;
          cum += z[i];
          choice = i;
          if (cum > target) break;
        }
      } else {
        if (keep * 16 < v) {
          std::sort(ids.begin(), ids.begin() + keep);
        } else {  // many kept ids: mark them and walk all ids instead of sorting
          kept_mask.assign(v, 0);
          for (int64_t j = 0; j < keep; ++j) kept_mask[ids[j]] = 1;
          keep = 0;
          for (int64_t i = 0; i < v; ++i) {
            if (kept_mask[i]) ids[keep++] = static_cast<int32_t>(i);
          }
        }
        for (int64_t j = 0; j < keep; ++j) kept_total += z[ids[j]];
        const double target = static_cast<double>(u[r]) * kept_total;
        double cum = 0;
        for (int64_t j = 0; j < keep; ++j) {
          const float pj = z[ids[j]];
          if (pj <= 0.f) continue;
          cum += pj;
          choice = ids[j];
          if (cum > target) break;
        }
      }
      op[r * os] = choice;
    }
  }
  if (bad_row.load() >= 0) {
    return absl::InvalidArgumentError(absl::StrCat("Sample: row ", bad_row.load(), " of logits ",
                                                   ShapeToString(logits.shape()),
                                                   " has a NaN or no finite logit"));
  }
  return absl::OkStatus();
}

}  // namespace cpu
}  // namespace cctune
