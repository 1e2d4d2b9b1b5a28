#include "core/strided.h"

#include <cstring>

namespace cctune {
namespace {

// Scalar element conversion through f32 (floating) or int64 (integral) without doubles in
// the common paths.
inline float ToF32(const void* p, DType t) {
  switch (t) {
    case DType::kF32:
      return *static_cast<const float*>(p);
    case DType::kBF16:
      return Bf16ToFloat(*static_cast<const bf16*>(p));
    case DType::kF16:
      return F16ToFloat(*static_cast<const f16*>(p));
    case DType::kI32:
      return static_cast<float>(*static_cast<const int32_t*>(p));
    case DType::kI64:
      return static_cast<float>(*static_cast<const int64_t*>(p));
    case DType::kBool:
      return *static_cast<const uint8_t*>(p) ? 1.f : 0.f;
  }
  return 0.f;
}

inline int64_t ToI64(const void* p, DType t) {
  switch (t) {
    case DType::kI32:
      return *static_cast<const int32_t*>(p);
    case DType::kI64:
      return *static_cast<const int64_t*>(p);
    case DType::kBool:
      return *static_cast<const uint8_t*>(p) ? 1 : 0;
    default:
      return static_cast<int64_t>(ToF32(p, t));
  }
}

inline void StoreElem(void* p, DType dt, const void* s, DType st) {
  switch (dt) {
    case DType::kF32:
      *static_cast<float*>(p) = ToF32(s, st);
      return;
    case DType::kBF16:
      *static_cast<bf16*>(p) = FloatToBf16(ToF32(s, st));
      return;
    case DType::kF16:
      *static_cast<f16*>(p) = FloatToF16(ToF32(s, st));
      return;
    case DType::kI32:
      *static_cast<int32_t*>(p) = static_cast<int32_t>(ToI64(s, st));
      return;
    case DType::kI64:
      *static_cast<int64_t*>(p) = ToI64(s, st);
      return;
    case DType::kBool:
      *static_cast<uint8_t*>(p) = (IsFloating(st) ? ToF32(s, st) != 0.f : ToI64(s, st) != 0);
      return;
  }
}

bool IsContiguous(const StridedView& v) {
  int64_t expected = 1;
  for (int i = v.ndim - 1; i >= 0; --i) {
    if (v.shape[i] != 1 && v.strides[i] != expected) return false;
    expected *= v.shape[i];
  }
  return true;
}

}  // namespace

void StridedCopyCpu(const StridedView& dst, const StridedView& src) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  const size_t dsz = DTypeSize(dst.dtype), ssz = DTypeSize(src.dtype);
  if (dst.dtype == src.dtype && IsContiguous(dst) && IsContiguous(src)) {
    std::memcpy(dst.data, src.data, static_cast<size_t>(n) * dsz);
    return;
  }
  // Iterate rows of the innermost dimension; the outer index is decomposed per row so rows can
  // run in parallel.
  const int nd = dst.ndim;
  const int64_t inner = nd > 0 ? dst.shape[nd - 1] : 1;
  const int64_t rows = n / inner;
  const int64_t ds_in = nd > 0 ? dst.strides[nd - 1] : 0;
  const int64_t ss_in = nd > 0 ? src.strides[nd - 1] : 0;
  char* dbase = static_cast<char*>(dst.data);
  const char* sbase = static_cast<const char*>(src.data);
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rem = r, doff = 0, soff = 0;
    for (int d = nd - 2; d >= 0; --d) {
      const int64_t i = rem % dst.shape[d];
      rem /= dst.shape[d];
      doff += i * dst.strides[d];
      soff += i * src.strides[d];
    }
    char* dp = dbase + doff * static_cast<int64_t>(dsz);
    const char* sp = sbase + soff * static_cast<int64_t>(ssz);
    if (dst.dtype == DType::kF32 && src.dtype == DType::kF32) {
      float* d = reinterpret_cast<float*>(dp);
      const float* s = reinterpret_cast<const float*>(sp);
      for (int64_t j = 0; j < inner; ++j) d[j * ds_in] = s[j * ss_in];
    } else if (dst.dtype == src.dtype && ds_in == 1 && ss_in == 1) {
      std::memcpy(dp, sp, static_cast<size_t>(inner) * dsz);
    } else {
      for (int64_t j = 0; j < inner; ++j) {
        StoreElem(dp + j * ds_in * static_cast<int64_t>(dsz), dst.dtype,
                  sp + j * ss_in * static_cast<int64_t>(ssz), src.dtype);
      }
    }
  }
}

}  // namespace cctune
