// Element types of tensors, and the scalar conversions between them.
// bf16 and f16 are stored as raw 16-bit patterns; arithmetic always happens in f32.
#ifndef CCTUNE_CORE_DTYPE_H_
#define CCTUNE_CORE_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cctune {

enum class DType : uint8_t { kF32, kBF16, kF16, kI32, kI64, kBool };

// Bits of a bfloat16 value (the upper half of an IEEE f32).
struct bf16 {
  uint16_t bits = 0;
};
// Bits of an IEEE binary16 value.
struct f16 {
  uint16_t bits = 0;
};

size_t DTypeSize(DType t);
const char* DTypeName(DType t);  // "f32", "bf16", "f16", "i32", "i64", "bool"
bool IsFloating(DType t);
// Accepts torchtune / HF / safetensors spellings: fp32 f32 float32 float F32, bf16 bfloat16
// BF16, fp16 f16 float16 half F16, int32 i32 I32, int64 i64 I64, bool BOOL.
absl::StatusOr<DType> ParseDType(absl::string_view name);

inline float Bf16ToFloat(bf16 x) {
  uint32_t u = static_cast<uint32_t>(x.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even; NaN stays a (quiet) NaN.
inline bf16 FloatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  bf16 r;
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    r.bits = static_cast<uint16_t>((u >> 16) | 0x40);
    return r;
  }
  u += 0x7fffu + ((u >> 16) & 1u);
  r.bits = static_cast<uint16_t>(u >> 16);
  return r;
}

float F16ToFloat(f16 x);
f16 FloatToF16(float f);  // round to nearest even, overflow to inf

// The conversions above by element type, for code templated on it (float, bf16, f16):
// ToFloat(x), FromFloat<T>(f).
inline float ToFloat(float x) { return x; }
inline float ToFloat(bf16 x) { return Bf16ToFloat(x); }
inline float ToFloat(f16 x) { return F16ToFloat(x); }
template <typename T>
T FromFloat(float f);
template <>
inline float FromFloat<float>(float f) {
  return f;
}
template <>
inline bf16 FromFloat<bf16>(float f) {
  return FloatToBf16(f);
}
template <>
inline f16 FromFloat<f16>(float f) {
  return FloatToF16(f);
}

template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kF32;
};
template <>
struct DTypeOf<bf16> {
  static constexpr DType value = DType::kBF16;
};
template <>
struct DTypeOf<f16> {
  static constexpr DType value = DType::kF16;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::kI32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::kI64;
};
template <>
struct DTypeOf<bool> {
  static constexpr DType value = DType::kBool;
};

// Reads element i of a buffer of type t as double / writes a double into it (with rounding).
// Slow; for copies between dtypes, tests and debug printing.
double LoadAsDouble(const void* base, DType t, int64_t i);
void StoreFromDouble(void* base, DType t, int64_t i, double v);

}  // namespace cctune

#endif  // CCTUNE_CORE_DTYPE_H_
