#include "checkpoint/dtype_convert.h"

#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/isa.h"

namespace cctune {
namespace {

constexpr int64_t kChunk = int64_t{1} << 16;  // elements per parallel work item

template <typename T>
inline float LoadF(const T* p, int64_t i) {
  return static_cast<float>(p[i]);
}
template <>
inline float LoadF<bf16>(const bf16* p, int64_t i) {
  return Bf16ToFloat(p[i]);
}
template <>
inline float LoadF<f16>(const f16* p, int64_t i) {
  return F16ToFloat(p[i]);
}
template <>
inline float LoadF<bool>(const bool* p, int64_t i) {
  return reinterpret_cast<const uint8_t*>(p)[i] ? 1.f : 0.f;
}

template <typename T>
inline int64_t LoadI(const T* p, int64_t i) {
  return static_cast<int64_t>(p[i]);
}
template <>
inline int64_t LoadI<bf16>(const bf16* p, int64_t i) {
  return static_cast<int64_t>(Bf16ToFloat(p[i]));
}
template <>
inline int64_t LoadI<f16>(const f16* p, int64_t i) {
  return static_cast<int64_t>(F16ToFloat(p[i]));
}
template <>
inline int64_t LoadI<bool>(const bool* p, int64_t i) {
  return reinterpret_cast<const uint8_t*>(p)[i] ? 1 : 0;
}

template <typename T>
constexpr bool kIsFloat = std::is_same<T, float>::value || std::is_same<T, bf16>::value ||
                          std::is_same<T, f16>::value;

template <typename D, typename S>
void ConvertRange(D* d, const S* s, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    if constexpr (std::is_same<D, float>::value) {
      d[i] = LoadF(s, i);
    } else if constexpr (std::is_same<D, bf16>::value) {
      d[i] = FloatToBf16(LoadF(s, i));
    } else if constexpr (std::is_same<D, f16>::value) {
      d[i] = FloatToF16(LoadF(s, i));
    } else if constexpr (std::is_same<D, bool>::value) {
      const bool nz = kIsFloat<S> ? LoadF(s, i) != 0.f : LoadI(s, i) != 0;
      reinterpret_cast<uint8_t*>(d)[i] = nz ? 1 : 0;
    } else {
      d[i] = static_cast<D>(LoadI(s, i));
    }
  }
}

// bf16 -> f32 is a 16-bit shift; written so the compiler vectorises it.
void Bf16ToF32Range(float* d, const bf16* s, int64_t begin, int64_t end) {
  const uint16_t* in = reinterpret_cast<const uint16_t*>(s);
  uint32_t* out = reinterpret_cast<uint32_t*>(d);
  for (int64_t i = begin; i < end; ++i) out[i] = static_cast<uint32_t>(in[i]) << 16;
}

// f16 -> f32 with the F16C instructions, chosen at run time.
__attribute__((target("avx,f16c"))) void F16ToF32RangeF16c(float* d, const f16* s,
                                                            int64_t begin, int64_t end) {
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    _mm256_storeu_ps(d + i, _mm256_cvtph_ps(h));
  }
  for (; i < end; ++i) d[i] = F16ToFloat(s[i]);
}

// F16C comes with the avx2 level (kernels/cpu/isa.h), so CCTUNE_CPU_ISA=scalar turns it off.
bool HasF16c() { return cpu::IsaSupported(cpu::IsaLevel::kAvx2); }

template <typename D, typename S>
void Dispatch(void* dst, const void* src, int64_t n) {
  D* d = static_cast<D*>(dst);
  const S* s = static_cast<const S*>(src);
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t b = c * kChunk;
    const int64_t e = b + kChunk < n ? b + kChunk : n;
    if constexpr (std::is_same<D, float>::value && std::is_same<S, bf16>::value) {
      Bf16ToF32Range(d, s, b, e);
    } else if constexpr (std::is_same<D, float>::value && std::is_same<S, f16>::value) {
      if (HasF16c()) {
        F16ToF32RangeF16c(d, s, b, e);
      } else {
        ConvertRange(d, s, b, e);
      }
    } else {
      ConvertRange(d, s, b, e);
    }
  }
}

template <typename D>
void DispatchSrc(void* dst, const void* src, DType src_type, int64_t n) {
  switch (src_type) {
    case DType::kF32:
      return Dispatch<D, float>(dst, src, n);
    case DType::kBF16:
      return Dispatch<D, bf16>(dst, src, n);
    case DType::kF16:
      return Dispatch<D, f16>(dst, src, n);
    case DType::kI32:
      return Dispatch<D, int32_t>(dst, src, n);
    case DType::kI64:
      return Dispatch<D, int64_t>(dst, src, n);
    case DType::kBool:
      return Dispatch<D, bool>(dst, src, n);
  }
}

void ParallelMemcpy(void* dst, const void* src, size_t bytes) {
  constexpr size_t kBlock = size_t{1} << 22;
  const int64_t blocks = static_cast<int64_t>((bytes + kBlock - 1) / kBlock);
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (int64_t b = 0; b < blocks; ++b) {
    const size_t off = static_cast<size_t>(b) * kBlock;
    const size_t len = bytes - off < kBlock ? bytes - off : kBlock;
    std::memcpy(static_cast<char*>(dst) + off, static_cast<const char*>(src) + off, len);
  }
}

}  // namespace

void ConvertElements(void* dst, DType dst_type, const void* src, DType src_type, int64_t n) {
  if (n <= 0) return;
  if (dst_type == src_type) {
    ParallelMemcpy(dst, src, static_cast<size_t>(n) * DTypeSize(dst_type));
    return;
  }
  switch (dst_type) {
    case DType::kF32:
      return DispatchSrc<float>(dst, src, src_type, n);
    case DType::kBF16:
      return DispatchSrc<bf16>(dst, src, src_type, n);
    case DType::kF16:
      return DispatchSrc<f16>(dst, src, src_type, n);
    case DType::kI32:
      return DispatchSrc<int32_t>(dst, src, src_type, n);
    case DType::kI64:
      return DispatchSrc<int64_t>(dst, src, src_type, n);
    case DType::kBool:
      return DispatchSrc<bool>(dst, src, src_type, n);
  }
}

}  // namespace cctune
