#include "kernels/cpu/linear.h"

#include <algorithm>

#include "kernels/cpu/cpu_util.h"
#include "kernels/cpu/gemm/gemm.h"
#include "kernels/cpu/op_profile.h"

namespace cctune {
namespace cpu {
namespace {

// A [rows, cols] matrix at `data` with element strides (rs, cs).
struct Mat {
  const void* data;
  DType dtype;
  int64_t rows, cols, rs, cs;
};

// Leading stride when the matrix is row-major with unit column stride (as the GEMM reads it).
bool RowMajorLd(const Mat& m, int64_t* ld) {
  const int64_t cs = m.cols == 1 ? 1 : m.cs;
  const int64_t rs = m.rows == 1 ? std::max<int64_t>(m.cols, 1) : m.rs;
  if (cs != 1 || rs < m.cols) return false;
  *ld = rs;
  return true;
}

// Leading stride when the matrix is the transpose of a row-major [cols, rows] one.
bool TransposedLd(const Mat& m, int64_t* ld) {
  const int64_t rs = m.rows == 1 ? 1 : m.rs;
  const int64_t cs = m.cols == 1 ? std::max<int64_t>(m.rows, 1) : m.cs;
  if (rs != 1 || cs < m.rows) return false;
  *ld = cs;
  return true;
}

// Copies a matrix into contiguous f32 [rows, cols] (rows in parallel when large).
void ToF32(const Mat& m, float* dst) {
#pragma omp parallel for schedule(static) if (m.rows * m.cols >= (1 << 16))
  for (int64_t r = 0; r < m.rows; ++r) {
    LoadF32(ElemAddr(m.data, m.dtype, r * m.rs), m.dtype, m.cs, m.cols, dst + r * m.cols);
  }
}

// How the GEMM reads one f32 operand: in place (plain or transposed), or from scratch.
struct Operand {
  const float* data;
  int64_t ld;
  bool trans;
};

Operand Prepare(const Mat& m, float* scratch) {
  int64_t ld;
  if (m.dtype == DType::kF32) {
    if (RowMajorLd(m, &ld)) return {static_cast<const float*>(m.data), ld, false};
    if (TransposedLd(m, &ld)) return {static_cast<const float*>(m.data), ld, true};
  }
  ToF32(m, scratch);
  return {scratch, std::max<int64_t>(m.cols, 1), false};
}

// Offset of batch `i` over the leading `nb` dims of a view.
int64_t BatchOffset(const Tensor& t, int nb, int64_t i) {
  int64_t off = 0;
  for (int d = nb - 1; d >= 0; --d) {
    off += (i % t.shape()[d]) * t.strides()[d];
    i /= t.shape()[d];
  }
  return off;
}

// t [..., cols] (m rows in all) as a row-major [m, cols] matrix: true, with *ld the row
// stride, when the last dim is unit-stride and the leading dims collapse to one stride (what
// t.View({m, cols}) would accept), without building a Tensor (decode calls this per
// projection; a view allocates its shape).
bool CollapsedRowMajorLd(const Tensor& t, int64_t m, int64_t cols, int64_t* ld) {
  const Shape& sh = t.shape();
  const Shape& st = t.strides();
  const int nd = static_cast<int>(sh.size());
  if (nd == 0) return false;
  int64_t rs = std::max<int64_t>(cols, 1);  // m == 1: any row stride will do
  int inner = -1;                            // the innermost leading dim of size > 1
  for (int d = nd - 2; d >= 0; --d) {
    if (sh[d] == 1) continue;
    if (inner < 0) {
      rs = st[d];
    } else if (st[d] != st[inner] * sh[inner]) {
      return false;
    }
    inner = d;
  }
  const int64_t cs = sh[nd - 1] == 1 ? 1 : st[nd - 1];
  return RowMajorLd({nullptr, DType::kF32, m, cols, rs, cs}, ld);
}

// t [..., cols] as a row-major f32 [m, cols] matrix: t's own memory when it is f32 and its
// leading dims collapse to one row stride (*ld set to it), else null.
float* DirectRows(const Tensor& t, int64_t m, int64_t cols, int64_t* ld) {
  if (t.dtype() != DType::kF32 || m == 0 || cols == 0) return nullptr;
  if (!CollapsedRowMajorLd(t, m, cols, ld)) return nullptr;
  return t.data<float>();
}

// t [..., cols] as f32 [m, cols] rows: in place when possible, else converted into scratch.
const float* RowsF32(const Tensor& t, int64_t m, int64_t cols, FloatBuffer& scratch,
                     int64_t* ld) {
  if (const float* p = DirectRows(t, m, cols, ld)) return p;
  scratch.Resize(m * cols);
  const RowIndexer rows(t.strided_view());
  const DType dt = t.dtype();
  const void* base = t.raw_data();
  float* dst = scratch.data();
#pragma omp parallel for schedule(static) if (m * cols >= (1 << 16))
  for (int64_t r = 0; r < m; ++r) {
    LoadF32(ElemAddr(base, dt, rows.Offset(r)), dt, rows.inner_stride(), cols, dst + r * cols);
  }
  *ld = cols;
  return dst;
}

// Rows of w converted to f32 per block for dx = dy · w: about this many floats per block.
constexpr int64_t kWeightBlockFloats = 1 << 22;

}  // namespace

absl::Status Linear(Tensor& out, const Tensor& x, const Tensor& w, const Tensor* bias) {
  const int64_t k = x.size(-1), n = w.size(0);
  const int64_t m = k > 0 ? x.numel() / k : out.numel() / std::max<int64_t>(n, 1);
  if (m == 0 || n == 0) return absl::OkStatus();

  // A: x as f32 [m, k] rows. A view is used when the leading dims collapse to one stride.
  FloatBuffer a_scratch;
  const float* a = nullptr;
  int64_t lda = std::max<int64_t>(k, 1);
  if (x.dtype() == DType::kF32 && k > 0) {
    int64_t ld;
    if (CollapsedRowMajorLd(x, m, k, &ld)) {
      a = x.data<float>();
      lda = ld;
    }
  }
  if (a == nullptr && k > 0) {
    a_scratch.Resize(m * k);
    const RowIndexer xr(x.strided_view());
    const DType xt = x.dtype();
    const void* xb = x.raw_data();
    float* dst = a_scratch.data();
#pragma omp parallel for schedule(static) if (m * k >= (1 << 16))
    for (int64_t r = 0; r < m; ++r) {
      LoadF32(ElemAddr(xb, xt, xr.Offset(r)), xt, xr.inner_stride(), k, dst + r * k);
    }
    a = dst;
  }

  // C: out as f32 [m, n] rows, in place when it is f32 with a collapsible layout.
  FloatBuffer c_scratch;
  float* c = nullptr;
  int64_t ldc = n;
  if (out.dtype() == DType::kF32) {
    int64_t ld;
    if (CollapsedRowMajorLd(out, m, n, &ld)) {
      c = out.data<float>();
      ldc = ld;
    }
  }
  const bool c_direct = c != nullptr;
  if (!c_direct) {
    c_scratch.Resize(m * n);
    c = c_scratch.data();
  }

  // B: w [n, k] rows as stored (any float dtype), or an f32 transposed view, or a copy.
  const Mat wm{w.raw_data(), w.dtype(), n, k, w.stride(0), w.stride(1)};
  int64_t ldb;
  if (k == 0) {
    for (int64_t r = 0; r < m; ++r) std::fill(c + r * ldc, c + r * ldc + n, 0.f);
  } else if (RowMajorLd(wm, &ldb)) {
    GemmNT(m, n, k, a, lda, w.raw_data(), w.dtype(), ldb, c, ldc, 0.f);
  } else if (w.dtype() == DType::kF32 && TransposedLd(wm, &ldb)) {
    // w's storage is a row-major [k, n] matrix: C = A · that.
    SgemmStrided(false, false, m, n, k, a, lda, w.data<float>(), ldb, c, ldc, 0.f);
  } else {
    CCTUNE_ASSIGN_OR_RETURN(Tensor wc, w.Contiguous());
    GemmNT(m, n, k, a, lda, wc.raw_data(), wc.dtype(), std::max<int64_t>(k, 1), c, ldc, 0.f);
  }

  // Bias, then the conversion to out's dtype and layout.
  FloatBuffer bias_f;
  if (bias != nullptr) {
    bias_f.Resize(n);
    LoadF32(bias->raw_data(), bias->dtype(), bias->stride(0), n, bias_f.data());
  }
  if (bias == nullptr && c_direct) return absl::OkStatus();
  const float* bp = bias_f.data();
  const RowIndexer orow(out.strided_view());
  const DType ot = out.dtype();
  void* ob = out.raw_data();
#pragma omp parallel for schedule(static) if (m * n >= (1 << 15))
  for (int64_t r = 0; r < m; ++r) {
    float* cr = c + r * ldc;
    if (bp != nullptr) {
      for (int64_t j = 0; j < n; ++j) cr[j] += bp[j];
    }
    if (!c_direct) StoreF32(cr, ElemAddr(ob, ot, orow.Offset(r)), ot, orow.inner_stride(), n);
  }
  return absl::OkStatus();
}

absl::Status Matmul(Tensor& out, const Tensor& a, const Tensor& b) {
  const int nd = a.dim(), nb = nd - 2;
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  int64_t batches = 1;
  for (int d = 0; d < nb; ++d) batches *= a.size(d);
  if (batches == 0 || m == 0 || n == 0) return absl::OkStatus();
  FloatBuffer a_scratch(m * k), b_scratch(k * n), c_scratch;
  const bool c_f32 = out.dtype() == DType::kF32;
  const Mat c_probe{nullptr, DType::kF32, m, n, out.stride(-2), out.stride(-1)};
  int64_t ldc_direct = 0;
  const bool c_direct = c_f32 && RowMajorLd(c_probe, &ldc_direct);
  if (!c_direct) c_scratch.Resize(m * n);
  for (int64_t i = 0; i < batches; ++i) {
    const Mat am{ElemAddr(a.raw_data(), a.dtype(), BatchOffset(a, nb, i)),
                 a.dtype(),
                 m,
                 k,
                 a.stride(-2),
                 a.stride(-1)};
    const Mat bm{ElemAddr(b.raw_data(), b.dtype(), BatchOffset(b, nb, i)),
                 b.dtype(),
                 k,
                 n,
                 b.stride(-2),
                 b.stride(-1)};
    char* cptr = ElemAddr(out.raw_data(), out.dtype(), BatchOffset(out, nb, i));
    float* c = c_direct ? reinterpret_cast<float*>(cptr) : c_scratch.data();
    const int64_t ldc = c_direct ? ldc_direct : n;
    if (k == 0) {
      for (int64_t r = 0; r < m; ++r) std::fill(c + r * ldc, c + r * ldc + n, 0.f);
    } else {
      const Operand ao = Prepare(am, a_scratch.data());
      const Operand bo = Prepare(bm, b_scratch.data());
      SgemmStrided(ao.trans, bo.trans, m, n, k, ao.data, ao.ld, bo.data, bo.ld, c, ldc, 0.f);
    }
    if (!c_direct) {
      for (int64_t r = 0; r < m; ++r) {
        StoreF32(c + r * n, ElemAddr(cptr, out.dtype(), r * out.stride(-2)), out.dtype(),
                 out.stride(-1), n);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status LinearBackward(Tensor* dx, Tensor* dw, Tensor* dbias, const Tensor& dy,
                            const Tensor& x, const Tensor& w) {
  const int64_t k = x.size(-1), n = w.size(0);
  int64_t m = 1;
  for (int d = 0; d < x.dim() - 1; ++d) m *= x.size(d);
  if (m == 0 || n == 0) return absl::OkStatus();
  FloatBuffer dy_scratch;
  int64_t ldy;
  const float* g = RowsF32(dy, m, n, dy_scratch, &ldy);  // dy as f32 [m, n]

  if (dbias != nullptr) {
    FloatBuffer sum(n);
    std::fill(sum.data(), sum.data() + n, 0.f);
    BlockedRowReduce(m, n, sum.data(), [&](int64_t r0, int64_t r1, float* part) {
      for (int64_t r = r0; r < r1; ++r) {
        const float* gr = g + r * ldy;
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) part[j] += gr[j];
      }
    });
    float* db = dbias->data<float>();
    const int64_t bs = dbias->stride(0);
    for (int64_t j = 0; j < n; ++j) db[j * bs] += sum.data()[j];
  }
  if (k == 0) return absl::OkStatus();

  const double gemm_flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * k;
  // dx [m, k] += dy [m, n] · w [n, k].
  if (dx != nullptr) {
    ScopedOpTimer timer(OpCategory::kGemmBackwardDx, gemm_flops, 4.0 * (m * n + 2 * m * k) +
                                                                 w.numel() * DTypeSize(w.dtype()));
    int64_t ldc;
    float* c = DirectRows(*dx, m, k, &ldc);
    const bool direct = c != nullptr;
    FloatBuffer c_scratch;
    if (!direct) {
      c_scratch.Resize(m * k);
      c = c_scratch.data();
      ldc = k;
    }
    const float beta = direct ? 1.f : 0.f;
    const Mat wm{w.raw_data(), w.dtype(), n, k, w.stride(0), w.stride(1)};
    int64_t ldw;
    if (w.dtype() == DType::kF32 && RowMajorLd(wm, &ldw)) {
      SgemmStrided(false, false, m, k, n, g, ldy, w.data<float>(), ldw, c, ldc, beta);
    } else if (w.dtype() == DType::kF32 && TransposedLd(wm, &ldw)) {
      // w's storage is a row-major [k, n] matrix, i.e. wᵀ.
      SgemmStrided(false, true, m, k, n, g, ldy, w.data<float>(), ldw, c, ldc, beta);
    } else if (w.dtype() == DType::kBF16 && w.stride(1) == 1 && w.stride(0) >= k &&
               GemmNNBf16(m, k, n, g, ldy, w.raw_data(), w.stride(0), c, ldc, beta)) {
      // bf16 w on a CPU whose bf16 dot product runs at twice the f32 rate (Zen 4/5): dy
      // rounded to bf16 as the forward's GemmNT rounds x (kernels/cpu/gemm/gemm.h).
    } else {
      // 16-bit (or oddly strided) w: dx += dy[:, n0:n1] · f32(w[n0:n1, :]) block by block.
      const int64_t rows_per_block = std::clamp<int64_t>(kWeightBlockFloats / k, 1, n);
      FloatBuffer wf(rows_per_block * k);
      for (int64_t n0 = 0; n0 < n; n0 += rows_per_block) {
        const int64_t nb = std::min(rows_per_block, n - n0);
        const Mat block{ElemAddr(w.raw_data(), w.dtype(), n0 * w.stride(0)), w.dtype(), nb, k,
                        w.stride(0), w.stride(1)};
        ToF32(block, wf.data());
        SgemmStrided(false, false, m, k, nb, g + n0, ldy, wf.data(), k, c, ldc,
                     n0 == 0 ? beta : 1.f);
      }
    }
    if (!direct) AccumulateRows(*dx, c, ldc);
  }

  // dw [n, k] += dyᵀ [n, m] · x [m, k].
  if (dw != nullptr) {
    ScopedOpTimer timer(OpCategory::kGemmBackwardDw, gemm_flops, 4.0 * (m * n + m * k + 2 * n * k));
    FloatBuffer x_scratch;
    int64_t ldx;
    const float* xf = RowsF32(x, m, k, x_scratch, &ldx);
    int64_t ldc;
    float* c = DirectRows(*dw, n, k, &ldc);
    const bool direct = c != nullptr;
    FloatBuffer c_scratch;
    if (!direct) {
      c_scratch.Resize(n * k);
      c = c_scratch.data();
      ldc = k;
    }
    // A bf16 weight's gradient from bf16 dot products where the CPU runs them at twice the f32
    // rate (Zen 4/5: dy and x rounded to bf16, kernels/cpu/gemm/gemm.h), else f32.
    const float beta = direct ? 1.f : 0.f;
    if (w.dtype() != DType::kBF16 || !GemmTNBf16(n, k, m, g, ldy, xf, ldx, c, ldc, beta)) {
      SgemmStrided(true, false, n, k, m, g, ldy, xf, ldx, c, ldc, beta);
    }
    if (!direct) AccumulateRows(*dw, c, ldc);
  }
  return absl::OkStatus();
}

}  // namespace cpu
}  // namespace cctune
