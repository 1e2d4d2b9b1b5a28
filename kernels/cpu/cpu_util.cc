#include "kernels/cpu/cpu_util.h"

#include <omp.h>

#include <cstring>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "core/status.h"

namespace cctune {
namespace cpu {
namespace {

inline float Bf16BitsToFloat(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even, NaN stays a quiet NaN (the same rule as core's FloatToBf16), written
// without branches so that the loops below vectorise.
inline uint16_t FloatToBf16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16) | 0x40u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

void LoadBf16(const uint16_t* s, int64_t stride, int64_t n, float* d) {
  if (stride == 1) {
    for (int64_t i = 0; i < n; ++i) d[i] = Bf16BitsToFloat(s[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) d[i] = Bf16BitsToFloat(s[i * stride]);
  }
}

void StoreBf16(const float* s, uint16_t* d, int64_t stride, int64_t n) {
  if (stride == 1) {
    for (int64_t i = 0; i < n; ++i) d[i] = FloatToBf16Bits(s[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) d[i * stride] = FloatToBf16Bits(s[i]);
  }
}

void LoadF16(const f16* s, int64_t stride, int64_t n, float* d) {
  int64_t i = 0;
#if defined(__F16C__)
  if (stride == 1) {
    for (; i + 8 <= n; i += 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
      _mm256_storeu_ps(d + i, _mm256_cvtph_ps(h));
    }
  }
#endif
  for (; i < n; ++i) d[i] = F16ToFloat(s[i * stride]);
}

void StoreF16(const float* s, f16* d, int64_t stride, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  if (stride == 1) {
    for (; i + 8 <= n; i += 8) {
      const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), h);
    }
  }
#endif
  for (; i < n; ++i) d[i * stride] = FloatToF16(s[i]);
}

}  // namespace

void LoadF32(const void* src, DType t, int64_t stride, int64_t n, float* dst) {
  switch (t) {
    case DType::kF32: {
      const float* s = static_cast<const float*>(src);
      if (stride == 1) {
        std::memcpy(dst, s, static_cast<size_t>(n) * sizeof(float));
      } else {
        for (int64_t i = 0; i < n; ++i) dst[i] = s[i * stride];
      }
      return;
    }
    case DType::kBF16:
      LoadBf16(static_cast<const uint16_t*>(src), stride, n, dst);
      return;
    case DType::kF16:
      LoadF16(static_cast<const f16*>(src), stride, n, dst);
      return;
    default:
      CCTUNE_CHECK(false, "LoadF32: not a float dtype: ", DTypeName(t));
  }
}

void StoreF32(const float* src, void* dst, DType t, int64_t stride, int64_t n) {
  switch (t) {
    case DType::kF32: {
      float* d = static_cast<float*>(dst);
      if (stride == 1) {
        if (d != src) std::memmove(d, src, static_cast<size_t>(n) * sizeof(float));
      } else {
        for (int64_t i = 0; i < n; ++i) d[i * stride] = src[i];
      }
      return;
    }
    case DType::kBF16:
      StoreBf16(src, static_cast<uint16_t*>(dst), stride, n);
      return;
    case DType::kF16:
      StoreF16(src, static_cast<f16*>(dst), stride, n);
      return;
    default:
      CCTUNE_CHECK(false, "StoreF32: not a float dtype: ", DTypeName(t));
  }
}

void RoundTo(DType t, float* x, int64_t n) {
  if (t == DType::kBF16) {
    for (int64_t i = 0; i < n; ++i) x[i] = Bf16BitsToFloat(FloatToBf16Bits(x[i]));
  } else if (t == DType::kF16) {
    constexpr int64_t kBlock = 256;
    f16 tmp[kBlock];
    for (int64_t i = 0; i < n; i += kBlock) {
      const int64_t len = n - i < kBlock ? n - i : kBlock;
      StoreF16(x + i, tmp, 1, len);
      LoadF16(tmp, 1, len, x + i);
    }
  }
}

RowIndexer::RowIndexer(const StridedView& v) {
  if (v.ndim == 0) return;
  nd_ = v.ndim - 1;
  for (int d = 0; d < nd_; ++d) {
    shape_[d] = v.shape[d];
    strides_[d] = v.strides[d];
    rows_ *= v.shape[d];
  }
  row_length_ = v.shape[v.ndim - 1];
  inner_stride_ = v.strides[v.ndim - 1];
}

int64_t ElementOffset(const StridedView& v, int64_t i) {
  int64_t off = 0;
  for (int d = v.ndim - 1; d >= 0; --d) {
    off += (i % v.shape[d]) * v.strides[d];
    i /= v.shape[d];
  }
  return off;
}

IterSpace Coalesce(const int64_t* shape, int ndim, const int64_t* const* strides, int nops) {
  CCTUNE_CHECK(nops >= 1 && nops <= 3, "Coalesce: ", nops, " operands");
  IterSpace it;
  int n = 0;
  for (int d = 0; d < ndim; ++d) {
    if (shape[d] == 1) continue;
    if (shape[d] == 0) {  // empty: one dim of size 0
      it.ndim = 1;
      it.shape[0] = 0;
      return it;
    }
    bool merge = n > 0;
    for (int op = 0; op < nops && merge; ++op) {
      merge = it.strides[op][n - 1] == strides[op][d] * shape[d];
    }
    if (merge) {
      it.shape[n - 1] *= shape[d];
      for (int op = 0; op < nops; ++op) it.strides[op][n - 1] = strides[op][d];
    } else {
      it.shape[n] = shape[d];
      for (int op = 0; op < nops; ++op) it.strides[op][n] = strides[op][d];
      ++n;
    }
  }
  if (n == 0) {  // every dim is 1 (or a 0-d view): one element
    it.ndim = 1;
    it.shape[0] = 1;
    for (int op = 0; op < nops; ++op) it.strides[op][0] = 1;
    return it;
  }
  it.ndim = n;
  return it;
}

void FloatBuffer::Resize(int64_t n) {
  if (n <= capacity_) return;
  const size_t bytes = (static_cast<size_t>(n) * sizeof(float) + 63) / 64 * 64;
  float* p = static_cast<float*>(std::aligned_alloc(64, bytes));
  CCTUNE_CHECK(p != nullptr, "FloatBuffer: out of memory for ", n, " floats");
  data_.reset(p);
  capacity_ = n;
}

int MaxThreads() { return omp_get_max_threads(); }

void AccumulateRows(const Tensor& dst, const float* src, int64_t ld) {
  CCTUNE_CHECK(dst.dtype() == DType::kF32, "AccumulateRows: dst is ", DTypeName(dst.dtype()));
  const RowIndexer rows(dst.strided_view());
  const int64_t n = rows.row_length(), stride = rows.inner_stride();
  float* base = dst.data<float>();
#pragma omp parallel for schedule(static) if (rows.rows() * n >= (1 << 15))
  for (int64_t r = 0; r < rows.rows(); ++r) {
    float* d = base + rows.Offset(r);
    const float* s = src + r * ld;
    if (stride == 1) {
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) d[j] += s[j];
    } else {
      for (int64_t j = 0; j < n; ++j) d[j * stride] += s[j];
    }
  }
}

}  // namespace cpu
}  // namespace cctune
