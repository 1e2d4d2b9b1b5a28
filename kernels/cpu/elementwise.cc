#include "kernels/cpu/elementwise.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_util.h"

namespace cctune {
namespace cpu {
namespace {

constexpr int64_t kChunk = 512;

// out[i] = fn(x[i], y[i]) over one shape; y may be null (unary). Loads each chunk into f32
// (in place when already contiguous f32), computes, then stores, so out may alias an input.
template <typename Fn>
void Elementwise(const Tensor& out, const Tensor& x, const Tensor* y, Fn fn) {
  const int nops = y != nullptr ? 3 : 2;
  const int64_t* strides[3] = {out.strides().data(), x.strides().data(),
                               y != nullptr ? y->strides().data() : nullptr};
  const IterSpace it = Coalesce(out.shape().data(), out.dim(), strides, nops);
  const int nd = it.ndim;
  const int64_t so = it.strides[0][nd - 1], sx = it.strides[1][nd - 1];
  const int64_t sy = y != nullptr ? it.strides[2][nd - 1] : 0;
  void* po = out.raw_data();
  const void* px = x.raw_data();
  const void* py = y != nullptr ? y->raw_data() : nullptr;
  const DType dto = out.dtype(), dtx = x.dtype(), dty = y != nullptr ? y->dtype() : dto;
  ForEachChunk(it, nops, kChunk, [&](const int64_t* off, int64_t len) {
    alignas(64) float xbuf[kChunk], ybuf[kChunk], obuf[kChunk];
    const float* xs = LoadF32Or(ElemAddr(px, dtx, off[1]), dtx, sx, len, xbuf);
    const float* ys = nullptr;
    if (py != nullptr) {
      if (sy == 0) {  // broadcast scalar along the chunk
        LoadF32(ElemAddr(py, dty, off[2]), dty, 1, 1, ybuf);
        for (int64_t i = 1; i < len; ++i) ybuf[i] = ybuf[0];
        ys = ybuf;
      } else {
        ys = LoadF32Or(ElemAddr(py, dty, off[2]), dty, sy, len, ybuf);
      }
    }
    const bool direct = dto == DType::kF32 && (so == 1 || len == 1);
    float* os = direct ? reinterpret_cast<float*>(ElemAddr(po, dto, off[0])) : obuf;
    fn(os, xs, ys, len);
    if (!direct) StoreF32(obuf, ElemAddr(po, dto, off[0]), dto, so, len);
  });
}

// sigmoid(g) through e = exp(-|g|) <= 1, which stays in FastExp's range for any g.
inline float Sigmoid(float g) {
  const float e = FastExp(-std::fabs(g));
  return (g >= 0.f ? 1.0f : e) / (1.0f + e);
}

// out (f32, shape B, any strides) += t (contiguous f32, shape D) summed over the dims along
// which B (trailing-aligned, each dim 1 or equal) was broadcast to D.
void AccumulateReduced(const Tensor& out, const Tensor& t) {
  const int nd = t.dim();
  const int64_t total = t.numel(), kept = out.numel();
  if (total == 0 || kept == 0) return;
  // B padded with leading 1s to D's rank.
  std::vector<int64_t> bshape(nd, 1);
  for (int i = 1; i <= out.dim(); ++i) bshape[nd - i] = out.size(out.dim() - i);
  std::vector<float> sum(kept, 0.f);
  // The common case: B equals D's trailing dims after some leading ones (a bias): D is [R, C].
  int lead = 0;
  while (lead < nd && bshape[lead] == 1) ++lead;
  bool trailing = true;
  for (int d = lead; d < nd; ++d) trailing = trailing && bshape[d] == t.size(d);
  const float* tp = t.data<float>();
  if (trailing) {
    const int64_t c = kept, r = total / kept;
    BlockedRowReduce(r, c, sum.data(), [&](int64_t r0, int64_t r1, float* part) {
      for (int64_t i = r0; i < r1; ++i) {
        const float* row = tp + i * c;
#pragma omp simd
        for (int64_t j = 0; j < c; ++j) part[j] += row[j];
      }
    });
  } else {
    // General: each output element sums its inputs in row-major order over the reduced dims.
    const Shape tstrides = ContiguousStrides(t.shape());
    std::vector<int64_t> red_size, red_stride;  // the reduced dims
    int64_t per_out = 1;
    for (int d = 0; d < nd; ++d) {
      if (bshape[d] == 1 && t.size(d) != 1) {
        red_size.push_back(t.size(d));
        red_stride.push_back(tstrides[d]);
        per_out *= t.size(d);
      }
    }
    const int nred = static_cast<int>(red_size.size());
#pragma omp parallel for schedule(static) if (total >= (1 << 15))
    for (int64_t o = 0; o < kept; ++o) {
      int64_t base = 0, rem = o;
      for (int d = nd - 1; d >= 0; --d) {
        base += (rem % bshape[d]) * tstrides[d];
        rem /= bshape[d];
      }
      float acc = 0.f;
      for (int64_t q = 0; q < per_out; ++q) {
        int64_t off = base, rq = q;
        for (int i = nred - 1; i >= 0; --i) {
          off += (rq % red_size[i]) * red_stride[i];
          rq /= red_size[i];
        }
        acc += tp[off];
      }
      sum[o] = acc;
    }
  }
  const StridedView ov = out.strided_view();
  float* ob = out.data<float>();
  for (int64_t i = 0; i < kept; ++i) ob[ElementOffset(ov, i)] += sum[i];
}

}  // namespace

absl::Status Add(Tensor& out, const Tensor& a, const Tensor& b) {
  CCTUNE_ASSIGN_OR_RETURN(Tensor bb, b.Expand(a.shape()));
  Elementwise(out, a, &bb, [](float* o, const float* x, const float* y, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
  });
  return absl::OkStatus();
}

absl::Status Mul(Tensor& out, const Tensor& a, const Tensor& b) {
  CCTUNE_ASSIGN_OR_RETURN(Tensor bb, b.Expand(a.shape()));
  Elementwise(out, a, &bb, [](float* o, const float* x, const float* y, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) o[i] = x[i] * y[i];
  });
  return absl::OkStatus();
}

absl::Status Scale(Tensor& out, const Tensor& x, float alpha) {
  Elementwise(out, x, nullptr, [alpha](float* o, const float* v, const float*, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) o[i] = alpha * v[i];
  });
  return absl::OkStatus();
}

absl::Status SiluMul(Tensor& out, const Tensor& gate, const Tensor& up) {
  Elementwise(out, gate, &up, [](float* o, const float* g, const float* u, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) o[i] = g[i] * Sigmoid(g[i]) * u[i];
  });
  return absl::OkStatus();
}

absl::Status SiluMulBackward(Tensor& dgate, Tensor& dup, const Tensor& dy, const Tensor& gate,
                             const Tensor& up) {
  const RowIndexer gr(gate.strided_view()), ur(up.strided_view()), yr(dy.strided_view());
  const RowIndexer dgr(dgate.strided_view()), dur(dup.strided_view());
  const int64_t f = gr.row_length(), rows = gr.rows();
  if (rows == 0 || f == 0) return absl::OkStatus();
  const DType gt = gate.dtype(), ut = up.dtype();
  const void* gbase = gate.raw_data();
  const void* ubase = up.raw_data();
  const float* ybase = dy.data<float>();
  float* dgbase = dgate.data<float>();
  float* dubase = dup.data<float>();
  const int64_t dgs = dgr.inner_stride(), dus = dur.inner_stride();
#pragma omp parallel if (rows * f >= (1 << 15))
  {
    FloatBuffer buf(5 * f);
    float* gb = buf.data();
    float* ub = gb + f;
    float* yb = ub + f;
    float* dg = yb + f;
    float* du = dg + f;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float* g = LoadF32Or(ElemAddr(gbase, gt, gr.Offset(r)), gt, gr.inner_stride(), f, gb);
      const float* u = LoadF32Or(ElemAddr(ubase, ut, ur.Offset(r)), ut, ur.inner_stride(), f, ub);
      const float* y = LoadF32Or(ybase + yr.Offset(r), DType::kF32, yr.inner_stride(), f, yb);
#pragma omp simd
      for (int64_t i = 0; i < f; ++i) {
        const float s = Sigmoid(g[i]);
        dg[i] = y[i] * u[i] * s * (1.0f + g[i] * (1.0f - s));
        du[i] = y[i] * g[i] * s;
      }
      float* og = dgbase + dgr.Offset(r);
      float* ou = dubase + dur.Offset(r);
      if (dgs == 1 && dus == 1) {  // the usual contiguous rows: vector adds
#pragma omp simd
        for (int64_t i = 0; i < f; ++i) og[i] += dg[i];
#pragma omp simd
        for (int64_t i = 0; i < f; ++i) ou[i] += du[i];
      } else {
        for (int64_t i = 0; i < f; ++i) og[i * dgs] += dg[i];
        for (int64_t i = 0; i < f; ++i) ou[i * dus] += du[i];
      }
    }
  }
  return absl::OkStatus();
}

absl::Status AddBackward(Tensor* da, Tensor* db, const Tensor& dy) {
  if (da != nullptr) CCTUNE_RETURN_IF_ERROR(Add(*da, *da, dy));
  if (db != nullptr) {
    CCTUNE_ASSIGN_OR_RETURN(Tensor g, dy.Contiguous());
    AccumulateReduced(*db, g);
  }
  return absl::OkStatus();
}

absl::Status MulBackward(Tensor* da, Tensor* db, const Tensor& dy, const Tensor& a,
                         const Tensor& b) {
  CCTUNE_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(dy.shape(), DType::kF32));
  if (da != nullptr) {
    CCTUNE_RETURN_IF_ERROR(Mul(t, dy, b));  // dy · b (b broadcast)
    CCTUNE_RETURN_IF_ERROR(Add(*da, *da, t));
  }
  if (db != nullptr) {
    CCTUNE_RETURN_IF_ERROR(Mul(t, dy, a));  // dy · a, then summed to b's shape
    AccumulateReduced(*db, t);
  }
  return absl::OkStatus();
}

}  // namespace cpu
}  // namespace cctune
