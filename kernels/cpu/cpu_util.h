// Helpers shared by the CPU kernels: f32 <-> storage-dtype row conversion, strided addressing
// of rows and elements, dimension coalescing for elementwise loops, and aligned scratch.
// Kernels do their math in f32 and use these to read and write f32/bf16/f16 storage.
#ifndef CCTUNE_KERNELS_CPU_CPU_UTIL_H_
#define CCTUNE_KERNELS_CPU_CPU_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "core/dtype.h"
#include "core/strided.h"
#include "core/tensor.h"

namespace cctune {
namespace cpu {

// Address of element `offset` (in elements) from `base`, for a buffer of dtype `t`.
inline char* ElemAddr(void* base, DType t, int64_t offset) {
  return static_cast<char*>(base) + offset * static_cast<int64_t>(DTypeSize(t));
}
inline const char* ElemAddr(const void* base, DType t, int64_t offset) {
  return static_cast<const char*>(base) + offset * static_cast<int64_t>(DTypeSize(t));
}

// dst[i] = f32(src[i * stride]) for i in [0, n). src: f32, bf16 or f16.
void LoadF32(const void* src, DType t, int64_t stride, int64_t n, float* dst);
// dst[i * stride] = round(src[i]) for i in [0, n). dst: f32, bf16 or f16.
void StoreF32(const float* src, void* dst, DType t, int64_t stride, int64_t n);
// `src` itself when it already is contiguous f32, else LoadF32 into `buf` and returns buf.
inline const float* LoadF32Or(const void* src, DType t, int64_t stride, int64_t n, float* buf) {
  if (t == DType::kF32 && (stride == 1 || n <= 1)) return static_cast<const float*>(src);
  LoadF32(src, t, stride, n, buf);
  return buf;
}

// exp(x) in f32 within about 2 ulp (Cephes' polynomial), written so that loops over it
// vectorise (GCC 12 will not if-convert a float select that feeds a float->int conversion, so
// the exponent is clamped as an integer): underflows to 0 below about -103.9 (and for -inf),
// NaN stays NaN; x must be <= 88.
inline float FastExp(float x) {
  const float xc = x < -104.f ? -104.f : x;
  const float t = x * 1.44269504088896341f + 0.5f;
  // -inf/NaN convert to INT_MIN (x86's "integer indefinite", scalar and vector alike; ISO C++
  // leaves it undefined), which the integer clamp below maps into range.
  int32_t n = static_cast<int32_t>(t);
  n = n < -150 ? -150 : n;
  n -= static_cast<float>(n) > t ? 1 : 0;  // n = floor(x·log2(e) + 1/2)
  const float fn = static_cast<float>(n);
  float r = xc - fn * 0.693359375f;
  r = r + fn * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // 2^n as two normal factors, so that results below 2^-126 round to subnormals and 0.
  const int32_t n1 = n / 2, n2 = n - n1;
  return p * __builtin_bit_cast(float, (n1 + 127) << 23) *
         __builtin_bit_cast(float, (n2 + 127) << 23);
}

// x rounded to dtype `t` and back (identity for f32): what storing then loading gives.
void RoundTo(DType t, float* x, int64_t n);

// Addresses the rows of a view (its last dimension), numbered in row-major order over the
// leading dimensions. A 0-d view has one row of one element.
class RowIndexer {
 public:
  explicit RowIndexer(const StridedView& v);
  int64_t rows() const { return rows_; }
  int64_t row_length() const { return row_length_; }
  int64_t inner_stride() const { return inner_stride_; }
  // Element offset of the first element of row r.
  int64_t Offset(int64_t r) const {
    int64_t off = 0;
    for (int d = nd_ - 1; d >= 0; --d) {
      const int64_t i = r % shape_[d];
      r /= shape_[d];
      off += i * strides_[d];
    }
    return off;
  }

 private:
  int nd_ = 0;  // leading dims
  int64_t shape_[kMaxDims] = {};
  int64_t strides_[kMaxDims] = {};
  int64_t rows_ = 1;
  int64_t row_length_ = 1;
  int64_t inner_stride_ = 1;
};

// Element offset of the element with row-major linear index `i` of a view.
int64_t ElementOffset(const StridedView& v, int64_t i);

// Up to three views of one shape, with dims merged where all operands are contiguous across
// them and size-1 dims dropped; ndim >= 1 (a lone dim of size numel when all are contiguous).
struct IterSpace {
  int ndim = 1;
  int64_t shape[kMaxDims] = {1};
  int64_t strides[3][kMaxDims] = {};
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[i];
    return n;
  }
};
IterSpace Coalesce(const int64_t* shape, int ndim, const int64_t* const* strides, int nops);

// Calls fn(offsets, len) for every chunk of up to `chunk` elements along the innermost dim of
// `it`, where offsets[op] is operand op's element offset of the chunk's first element (its
// stride along the chunk is it.strides[op][it.ndim - 1]). Chunks run in parallel (OpenMP) when
// there are enough elements to pay for it.
template <typename Fn>
void ForEachChunk(const IterSpace& it, int nops, int64_t chunk, Fn&& fn) {
  const int nd = it.ndim;
  const int64_t inner = it.shape[nd - 1];
  if (inner == 0) return;
  int64_t rows = 1;
  for (int d = 0; d < nd - 1; ++d) rows *= it.shape[d];
  if (rows == 0) return;
  const int64_t per_row = (inner + chunk - 1) / chunk;
  const int64_t items = rows * per_row;
#pragma omp parallel for schedule(static) if (rows * inner >= (1 << 15))
  for (int64_t w = 0; w < items; ++w) {
    int64_t r = w / per_row;
    const int64_t c0 = (w % per_row) * chunk;
    int64_t off[3] = {0, 0, 0};
    for (int d = nd - 2; d >= 0; --d) {
      const int64_t i = r % it.shape[d];
      r /= it.shape[d];
      for (int op = 0; op < nops; ++op) off[op] += i * it.strides[op][d];
    }
    for (int op = 0; op < nops; ++op) off[op] += c0 * it.strides[op][nd - 1];
    fn(static_cast<const int64_t*>(off), inner - c0 < chunk ? inner - c0 : chunk);
  }
}

// 64-byte aligned, uninitialised f32 scratch.
class FloatBuffer {
 public:
  FloatBuffer() = default;
  explicit FloatBuffer(int64_t n) { Resize(n); }
  void Resize(int64_t n);
  float* data() const { return data_.get(); }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float[], Free> data_;
  int64_t capacity_ = 0;
};

// The number of OpenMP threads a parallel region would get here.
int MaxThreads();

// dst rows += src rows, for an f32 view `dst` (any strides; rows as RowIndexer numbers them)
// and a row-major f32 matrix `src` with leading stride `ld`. Rows in parallel when large.
void AccumulateRows(const Tensor& dst, const float* src, int64_t ld);

// out[j] += sum over rows r of row r's contribution to column j, in an order fixed by `rows`
// alone (so the result does not depend on the thread count): the rows are cut into at most
// 256 blocks of equal size; fn(r0, r1, partial) adds rows [r0, r1) into partial[0, d) (zeroed
// before), the blocks run in parallel, and their partials are summed in block order.
// Backward kernels use it for weight and bias gradients, doing their per-row work in fn.
template <typename Fn>
void BlockedRowReduce(int64_t rows, int64_t d, float* out, Fn&& fn) {
  if (rows <= 0) return;
  const int64_t block = std::max<int64_t>(8, (rows + 255) / 256);
  const int64_t blocks = (rows + block - 1) / block;
  FloatBuffer partials(blocks * std::max<int64_t>(d, 1));
  float* p = partials.data();
#pragma omp parallel for schedule(dynamic, 1) if (blocks > 1 && rows * d >= (1 << 13))
  for (int64_t bl = 0; bl < blocks; ++bl) {
    float* pb = p + bl * d;
    std::fill(pb, pb + d, 0.f);
    fn(bl * block, std::min(rows, (bl + 1) * block), pb);
  }
  constexpr int64_t kCols = 512;
#pragma omp parallel for schedule(static) if (blocks * d >= (1 << 16))
  for (int64_t j0 = 0; j0 < d; j0 += kCols) {
    const int64_t j1 = std::min(d, j0 + kCols);
    for (int64_t bl = 0; bl < blocks; ++bl) {
      const float* pb = p + bl * d;
#pragma omp simd
      for (int64_t j = j0; j < j1; ++j) out[j] += pb[j];
    }
  }
}

}  // namespace cpu
}  // namespace cctune

#endif  // CCTUNE_KERNELS_CPU_CPU_UTIL_H_
