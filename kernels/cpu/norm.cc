#include "kernels/cpu/norm.h"

#include <cmath>
#include <limits>

#include "kernels/cpu/cpu_util.h"

namespace cctune {
namespace cpu {

namespace {
// y = rmsnorm(x) · w for one row of d values held in f32 (x read before y is written: y may be
// x's buffer). torchtune rounds the normalised x to x's dtype `xt` (type_as) before the weight
// multiply.
void NormalizeRow(const float* x, int64_t d, DType xt, const float* w, float eps, float* y) {
  float ss = 0.f;
#pragma omp simd reduction(+ : ss)
  for (int64_t i = 0; i < d; ++i) ss += x[i] * x[i];
  const float rstd = 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
  for (int64_t i = 0; i < d; ++i) y[i] = x[i] * rstd;
  RoundTo(xt, y, d);
  for (int64_t i = 0; i < d; ++i) y[i] *= w[i];
}
}  // namespace

absl::Status RmsNorm(Tensor& out, const Tensor& x, const Tensor& weight, float eps) {
  const RowIndexer xr(x.strided_view()), orow(out.strided_view());
  const int64_t d = xr.row_length(), rows = xr.rows();
  if (rows == 0 || d == 0) return absl::OkStatus();
  // Weight converted once: [d] f32.
  FloatBuffer w(d);
  LoadF32(weight.raw_data(), weight.dtype(), weight.stride(0), d, w.data());
  const float* wp = w.data();
  const DType xt = x.dtype(), ot = out.dtype();
  const void* xbase = x.raw_data();
  void* obase = out.raw_data();
#pragma omp parallel if (rows * d >= (1 << 14))
  {
    FloatBuffer buf(d);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      float* y = buf.data();
      const float* xs = LoadF32Or(ElemAddr(xbase, xt, xr.Offset(r)), xt, xr.inner_stride(), d, y);
      NormalizeRow(xs, d, xt, wp, eps, y);
      StoreF32(y, ElemAddr(obase, ot, orow.Offset(r)), ot, orow.inner_stride(), d);
    }
  }
  return absl::OkStatus();
}

absl::Status AddRmsNorm(Tensor& sum, Tensor& norm, const Tensor& a, const Tensor& b,
                        const Tensor& weight, float eps) {
  const RowIndexer ar(a.strided_view()), br(b.strided_view()), sr(sum.strided_view()),
      nr(norm.strided_view());
  const int64_t d = ar.row_length(), rows = ar.rows();
  if (rows == 0 || d == 0) return absl::OkStatus();
  FloatBuffer w(d);
  LoadF32(weight.raw_data(), weight.dtype(), weight.stride(0), d, w.data());
  const float* wp = w.data();
  const DType at = a.dtype(), bt = b.dtype(), st = sum.dtype(), nt = norm.dtype();
  const void* abase = a.raw_data();
  const void* bbase = b.raw_data();
  void* sbase = sum.raw_data();
  void* nbase = norm.raw_data();
#pragma omp parallel if (rows * d >= (1 << 14))
  {
    FloatBuffer abuf(d), bbuf(d), hbuf(d), ybuf(d);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float* as = LoadF32Or(ElemAddr(abase, at, ar.Offset(r)), at, ar.inner_stride(), d,
                                  abuf.data());
      const float* bs = LoadF32Or(ElemAddr(bbase, bt, br.Offset(r)), bt, br.inner_stride(), d,
                                  bbuf.data());
      float* h = hbuf.data();
#pragma omp simd
      for (int64_t i = 0; i < d; ++i) h[i] = as[i] + bs[i];
      RoundTo(st, h, d);  // the sum as Add stores it, which RmsNorm would read back
      StoreF32(h, ElemAddr(sbase, st, sr.Offset(r)), st, sr.inner_stride(), d);
      float* y = ybuf.data();
      NormalizeRow(h, d, st, wp, eps, y);
      StoreF32(y, ElemAddr(nbase, nt, nr.Offset(r)), nt, nr.inner_stride(), d);
    }
  }
  return absl::OkStatus();
}

absl::Status Softmax(Tensor& out, const Tensor& x) {
  const RowIndexer xr(x.strided_view()), orow(out.strided_view());
  const int64_t d = xr.row_length(), rows = xr.rows();
  if (rows == 0 || d == 0) return absl::OkStatus();
  const DType xt = x.dtype(), ot = out.dtype();
  const void* xbase = x.raw_data();
  void* obase = out.raw_data();
#pragma omp parallel if (rows * d >= (1 << 14))
  {
    FloatBuffer buf(d);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      float* y = buf.data();
      const float* xs = LoadF32Or(ElemAddr(xbase, xt, xr.Offset(r)), xt, xr.inner_stride(), d, y);
      float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
      for (int64_t i = 0; i < d; ++i) mx = xs[i] > mx ? xs[i] : mx;  // NaN shows up below
      float sum = 0.f;
#pragma omp simd reduction(+ : sum)
      for (int64_t i = 0; i < d; ++i) {
        y[i] = FastExp(xs[i] - mx);
        sum += y[i];
      }
      const float inv = 1.0f / sum;
      for (int64_t i = 0; i < d; ++i) y[i] *= inv;
      StoreF32(y, ElemAddr(obase, ot, orow.Offset(r)), ot, orow.inner_stride(), d);
    }
  }
  return absl::OkStatus();
}

absl::Status RmsNormBackward(Tensor& dx, Tensor* dweight, const Tensor& dy, const Tensor& x,
                             const Tensor& weight, float eps) {
  const RowIndexer xr(x.strided_view()), gr(dy.strided_view()), dr(dx.strided_view());
  const int64_t d = xr.row_length(), rows = xr.rows();
  if (rows == 0 || d == 0) return absl::OkStatus();
  FloatBuffer w(d);
  LoadF32(weight.raw_data(), weight.dtype(), weight.stride(0), d, w.data());
  const float* wp = w.data();
  const DType xt = x.dtype();
  const void* xbase = x.raw_data();
  const float* gbase = dy.data<float>();
  float* dbase = dx.data<float>();
  const int64_t gs = gr.inner_stride(), ds = dr.inner_stride();
  const float inv_d = 1.0f / static_cast<float>(d);
  FloatBuffer dw_sum(d);
  std::fill(dw_sum.data(), dw_sum.data() + d, 0.f);
  // Rows [r0, r1): dx, and (when wanted) dy∘x̂ summed into part. scratch: 3·d floats.
  auto rows_fn = [&](int64_t r0, int64_t r1, float* part, float* scratch) {
    float* xb = scratch;
    float* gb = xb + d;
    float* t = gb + d;
    for (int64_t r = r0; r < r1; ++r) {
      const float* xs = LoadF32Or(ElemAddr(xbase, xt, xr.Offset(r)), xt, xr.inner_stride(), d, xb);
      const float* g = LoadF32Or(gbase + gr.Offset(r), DType::kF32, gs, d, gb);
      float ss = 0.f;
#pragma omp simd reduction(+ : ss)
      for (int64_t i = 0; i < d; ++i) ss += xs[i] * xs[i];
      const float rstd = 1.0f / std::sqrt(ss * inv_d + eps);
      // dot = mean(dy∘w∘x); t = dy∘w.
      float dot = 0.f;
#pragma omp simd reduction(+ : dot)
      for (int64_t i = 0; i < d; ++i) {
        t[i] = g[i] * wp[i];
        dot += t[i] * xs[i];
      }
      const float c = rstd * rstd * dot * inv_d;
      float* o = dbase + dr.Offset(r);
      if (ds == 1) {
#pragma omp simd
        for (int64_t i = 0; i < d; ++i) o[i] += rstd * (t[i] - xs[i] * c);
      } else {
        for (int64_t i = 0; i < d; ++i) o[i * ds] += rstd * (t[i] - xs[i] * c);
      }
      if (part != nullptr) {
        for (int64_t i = 0; i < d; ++i) t[i] = xs[i] * rstd;
        RoundTo(xt, t, d);  // x̂ as the forward rounded it
#pragma omp simd
        for (int64_t i = 0; i < d; ++i) part[i] += g[i] * t[i];
      }
    }
  };
  if (dweight == nullptr) {
#pragma omp parallel if (rows * d >= (1 << 14))
    {
      FloatBuffer scratch(3 * d);
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r) rows_fn(r, r + 1, nullptr, scratch.data());
    }
    return absl::OkStatus();
  }
  BlockedRowReduce(rows, d, dw_sum.data(), [&](int64_t r0, int64_t r1, float* part) {
    FloatBuffer scratch(3 * d);
    rows_fn(r0, r1, part, scratch.data());
  });
  float* dwp = dweight->data<float>();
  const int64_t ws = dweight->stride(0);
  for (int64_t i = 0; i < d; ++i) dwp[i * ws] += dw_sum.data()[i];
  return absl::OkStatus();
}

absl::Status SoftmaxBackward(Tensor& dx, const Tensor& dy, const Tensor& y) {
  const RowIndexer yr(y.strided_view()), gr(dy.strided_view()), dr(dx.strided_view());
  const int64_t d = yr.row_length(), rows = yr.rows();
  if (rows == 0 || d == 0) return absl::OkStatus();
  const DType yt = y.dtype();
  const void* ybase = y.raw_data();
  const float* gbase = dy.data<float>();
  float* dbase = dx.data<float>();
#pragma omp parallel if (rows * d >= (1 << 14))
  {
    FloatBuffer buf(2 * d);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      float* yb = buf.data();
      float* gb = yb + d;
      const float* ys = LoadF32Or(ElemAddr(ybase, yt, yr.Offset(r)), yt, yr.inner_stride(), d, yb);
      // dy is copied when it is not contiguous, so a dx that is dy itself is safe either way.
      const float* g = LoadF32Or(gbase + gr.Offset(r), DType::kF32, gr.inner_stride(), d, gb);
      float dot = 0.f;
#pragma omp simd reduction(+ : dot)
      for (int64_t i = 0; i < d; ++i) dot += g[i] * ys[i];
      float* o = gb;
      for (int64_t i = 0; i < d; ++i) o[i] = ys[i] * (g[i] - dot);
      StoreF32(o, dbase + dr.Offset(r), DType::kF32, dr.inner_stride(), d);
    }
  }
  return absl::OkStatus();
}

}  // namespace cpu
}  // namespace cctune
