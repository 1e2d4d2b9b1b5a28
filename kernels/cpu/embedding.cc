#include "kernels/cpu/embedding.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "kernels/cpu/cpu_util.h"

namespace cctune {
namespace cpu {
namespace {

// The ids as int64 in row-major order, or OutOfRange naming the first one outside [0, v).
// Inline up to 16 ids: a decode step (batch <= 16) allocates nothing here.
using Ids = absl::InlinedVector<int64_t, 16>;

absl::Status ReadIds(const char* op, const Tensor& ids, int64_t v, Ids* rows) {
  const int64_t n = ids.numel();
  const StridedView iv = ids.strided_view();
  rows->resize(n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t off = ElementOffset(iv, i);
    const int64_t id = ids.dtype() == DType::kI64 ? static_cast<const int64_t*>(iv.data)[off]
                                                  : static_cast<const int32_t*>(iv.data)[off];
    if (id < 0 || id >= v) {
      return absl::OutOfRangeError(absl::StrCat(op, ": id ", id, " at index ", i, " of ids ",
                                                ShapeToString(ids.shape()), " is outside [0, ",
                                                v, ")"));
    }
    (*rows)[i] = id;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Embedding(Tensor& out, const Tensor& table, const Tensor& ids) {
  const int64_t v = table.size(0), d = table.size(1), n = ids.numel();
  Ids rows;
  CCTUNE_RETURN_IF_ERROR(ReadIds("Embedding", ids, v, &rows));
  if (d == 0) return absl::OkStatus();
  const RowIndexer orow(out.strided_view());
  const DType tt = table.dtype(), ot = out.dtype();
  const int64_t ts0 = table.stride(0), ts1 = table.stride(1), os = orow.inner_stride();
  const void* tbase = table.raw_data();
  void* obase = out.raw_data();
  const bool memcpy_rows = tt == ot && ts1 == 1 && os == 1;
  const size_t row_bytes = static_cast<size_t>(d) * DTypeSize(tt);
#pragma omp parallel if (n * d >= (1 << 15))
  {
    FloatBuffer buf(memcpy_rows ? 0 : d);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const char* src = ElemAddr(tbase, tt, rows[i] * ts0);
      char* dst = ElemAddr(obase, ot, orow.Offset(i));
      if (memcpy_rows) {
        std::memcpy(dst, src, row_bytes);
      } else {
        const float* f = LoadF32Or(src, tt, ts1, d, buf.data());
        StoreF32(f, dst, ot, os, d);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status EmbeddingBackward(Tensor& dtable, const Tensor& dy, const Tensor& ids) {
  const int64_t v = dtable.size(0), d = dtable.size(1), n = ids.numel();
  Ids rows;
  CCTUNE_RETURN_IF_ERROR(ReadIds("EmbeddingBackward", ids, v, &rows));
  if (n == 0 || d == 0) return absl::OkStatus();
  // order: the indices sorted by id, index order within an id; starts: where each id begins.
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return rows[a] < rows[b]; });
  std::vector<int64_t> starts;
  for (int64_t i = 0; i < n; ++i) {
    if (i == 0 || rows[order[i]] != rows[order[i - 1]]) starts.push_back(i);
  }
  const int64_t groups = static_cast<int64_t>(starts.size());
  starts.push_back(n);
  const RowIndexer gr(dy.strided_view());
  const int64_t gs = gr.inner_stride(), ts0 = dtable.stride(0), ts1 = dtable.stride(1);
  const float* gbase = dy.data<float>();
  float* tbase = dtable.data<float>();
#pragma omp parallel if (n * d >= (1 << 15))
  {
    FloatBuffer acc(d);
#pragma omp for schedule(dynamic, 16)
    for (int64_t u = 0; u < groups; ++u) {
      float* a = acc.data();
      std::fill(a, a + d, 0.f);
      for (int64_t i = starts[u]; i < starts[u + 1]; ++i) {
        const float* g = gbase + gr.Offset(order[i]);
        if (gs == 1) {
#pragma omp simd
          for (int64_t j = 0; j < d; ++j) a[j] += g[j];
        } else {
          for (int64_t j = 0; j < d; ++j) a[j] += g[j * gs];
        }
      }
      float* t = tbase + rows[order[starts[u]]] * ts0;
      for (int64_t j = 0; j < d; ++j) t[j * ts1] += a[j];
    }
  }
  return absl::OkStatus();
}

}  // namespace cpu
}  // namespace cctune
