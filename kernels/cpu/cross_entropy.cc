#include "kernels/cpu/cross_entropy.h"

#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "kernels/cpu/cpu_util.h"

namespace cctune {
namespace cpu {
namespace {

// The targets as int64; OutOfRange for one outside [0, v) that is not ignore_index.
absl::Status ReadTargets(const char* op, const Tensor& targets, int64_t v, int64_t ignore_index,
                         std::vector<int64_t>* out) {
  const int64_t n = targets.numel();
  const StridedView tv = targets.strided_view();
  out->resize(n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t off = ElementOffset(tv, i);
    const int64_t t = targets.dtype() == DType::kI64 ? static_cast<const int64_t*>(tv.data)[off]
                                                     : static_cast<const int32_t*>(tv.data)[off];
    if (t != ignore_index && (t < 0 || t >= v)) {
      return absl::OutOfRangeError(absl::StrCat(op, ": target ", t, " of row ", i,
                                                " is outside [0, ", v,
                                                ") and is not ignore_index (", ignore_index, ")"));
    }
    (*out)[i] = t;
  }
  return absl::OkStatus();
}

// Row max and sum of exp(x - max) of x[0, v). The sum runs over chunks of 512 in 16 lanes,
// the chunks added in fp64: accurate to a few f32 ulp for any v, with or without
// vectorisation (a plain running f32 sum over a 128k vocabulary would lose ~1e-4).
inline void RowStats(const float* x, int64_t v, float* mx_out, float* sum_out) {
  float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
  for (int64_t j = 0; j < v; ++j) mx = x[j] > mx ? x[j] : mx;
  constexpr int64_t kChunk = 512, kLanes = 16;
  double total = 0.0;
  for (int64_t c0 = 0; c0 < v; c0 += kChunk) {
    const int64_t c1 = c0 + kChunk < v ? c0 + kChunk : v;
    float lanes[kLanes] = {};
    int64_t j = c0;
    for (; j + kLanes <= c1; j += kLanes) {
#pragma omp simd
      for (int64_t l = 0; l < kLanes; ++l) lanes[l] += FastExp(x[j + l] - mx);
    }
    float chunk = 0.f;
    for (; j < c1; ++j) chunk += FastExp(x[j] - mx);
    for (int64_t l = 0; l < kLanes; ++l) chunk += lanes[l];
    total += chunk;
  }
  *mx_out = mx;
  *sum_out = static_cast<float>(total);
}

}  // namespace

absl::Status CrossEntropyForward(Tensor& loss_sum, Tensor& num_valid, Tensor* row_loss,
                                 const Tensor& logits, const Tensor& targets,
                                 int64_t ignore_index) {
  const int64_t n = logits.size(0), v = logits.size(1);
  std::vector<int64_t> tgt;
  CCTUNE_RETURN_IF_ERROR(ReadTargets("CrossEntropyForward", targets, v, ignore_index, &tgt));
  std::vector<float> losses(n, 0.f);
  const DType lt = logits.dtype();
  const void* base = logits.raw_data();
  const int64_t ls0 = logits.stride(0), ls1 = logits.stride(1);
#pragma omp parallel if (n * v >= (1 << 15))
  {
    FloatBuffer buf(v);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      if (tgt[i] == ignore_index) continue;
      const float* x = LoadF32Or(ElemAddr(base, lt, i * ls0), lt, ls1, v, buf.data());
      float mx, sum;
      RowStats(x, v, &mx, &sum);
      losses[i] = mx + std::log(sum) - x[tgt[i]];
    }
  }
  double total = 0.0;
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (tgt[i] == ignore_index) continue;
    total += losses[i];
    ++count;
  }
  *loss_sum.data<float>() = static_cast<float>(total);
  *num_valid.data<int64_t>() = count;
  if (row_loss != nullptr) {
    StoreF32(losses.data(), row_loss->raw_data(), DType::kF32, row_loss->stride(0), n);
  }
  return absl::OkStatus();
}

absl::Status CrossEntropyBackward(Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                                  float scale, int64_t ignore_index) {
  const int64_t n = logits.size(0), v = logits.size(1);
  std::vector<int64_t> tgt;
  CCTUNE_RETURN_IF_ERROR(ReadTargets("CrossEntropyBackward", targets, v, ignore_index, &tgt));
  const DType lt = logits.dtype();
  const void* base = logits.raw_data();
  const int64_t ls0 = logits.stride(0), ls1 = logits.stride(1);
  float* dbase = dlogits.data<float>();
  const int64_t ds0 = dlogits.stride(0), ds1 = dlogits.stride(1);
#pragma omp parallel if (n * v >= (1 << 15))
  {
    FloatBuffer buf(v);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      float* d = dbase + i * ds0;
      if (tgt[i] == ignore_index) {
        for (int64_t j = 0; j < v; ++j) d[j * ds1] = 0.f;
        continue;
      }
      const float* x = LoadF32Or(ElemAddr(base, lt, i * ls0), lt, ls1, v, buf.data());
      float mx, sum;
      RowStats(x, v, &mx, &sum);
      const float f = scale / sum;
      // Straight into dlogits when it has unit stride (x may be that same row), else via buf.
      float* o = ds1 == 1 ? d : buf.data();
#pragma omp simd
      for (int64_t j = 0; j < v; ++j) o[j] = FastExp(x[j] - mx) * f;
      o[tgt[i]] -= scale;
      if (o != d) StoreF32(o, d, DType::kF32, ds1, v);
    }
  }
  return absl::OkStatus();
}

}  // namespace cpu
}  // namespace cctune
