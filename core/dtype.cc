#include "core/dtype.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace cctune {

size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kBF16:
    case DType::kF16:
      return 2;
    case DType::kI64:
      return 8;
    case DType::kBool:
      return 1;
  }
  return 0;
}

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "f16";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
    case DType::kBool:
      return "bool";
  }
  return "?";
}

bool IsFloating(DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16; }

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  if (name == "fp32" || name == "f32" || name == "float32" || name == "float" || name == "F32")
    return DType::kF32;
  if (name == "bf16" || name == "bfloat16" || name == "BF16") return DType::kBF16;
  if (name == "fp16" || name == "f16" || name == "float16" || name == "half" || name == "F16")
    return DType::kF16;
  if (name == "int32" || name == "i32" || name == "I32") return DType::kI32;
  if (name == "int64" || name == "i64" || name == "I64") return DType::kI64;
  if (name == "bool" || name == "BOOL") return DType::kBool;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown dtype '", name, "' (accepted: fp32, bf16, fp16, int32, int64, bool)"));
}

float F16ToFloat(f16 x) {
  const uint32_t sign = (x.bits & 0x8000u) << 16;
  const uint32_t exp = (x.bits >> 10) & 0x1f;
  uint32_t mant = x.bits & 0x3ff;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400) == 0);
      u = sign | ((127 - 15 - e) << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

f16 FloatToF16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  f16 r;
  if (abs > 0x7f800000u) {  // NaN
    r.bits = sign | 0x7e00;
    return r;
  }
  if (abs >= 0x477ff000u) {  // rounds to >= 65520: inf
    r.bits = sign | 0x7c00;
    return r;
  }
  if (abs < 0x38800000u) {  // below the smallest normal (2^-14): subnormal or zero
    // value = abs_float; f16 subnormal unit is 2^-24.
    float af;
    std::memcpy(&af, &abs, 4);
    const float scaled = af * 16777216.0f;  // / 2^-24, exact
    r.bits = sign | static_cast<uint16_t>(std::nearbyint(scaled));
    return r;
  }
  // Normal: rebias exponent and round the 13 dropped mantissa bits to nearest even.
  uint32_t v = abs - ((127 - 15) << 23);
  v += 0xfffu + ((v >> 13) & 1u);
  r.bits = sign | static_cast<uint16_t>(v >> 13);
  return r;
}

double LoadAsDouble(const void* base, DType t, int64_t i) {
  switch (t) {
    case DType::kF32:
      return static_cast<const float*>(base)[i];
    case DType::kBF16:
      return Bf16ToFloat(static_cast<const bf16*>(base)[i]);
    case DType::kF16:
      return F16ToFloat(static_cast<const f16*>(base)[i]);
    case DType::kI32:
      return static_cast<const int32_t*>(base)[i];
    case DType::kI64:
      return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case DType::kBool:
      return static_cast<const uint8_t*>(base)[i] ? 1.0 : 0.0;
  }
  return 0;
}

void StoreFromDouble(void* base, DType t, int64_t i, double v) {
  switch (t) {
    case DType::kF32:
      static_cast<float*>(base)[i] = static_cast<float>(v);
      return;
    case DType::kBF16:
      static_cast<bf16*>(base)[i] = FloatToBf16(static_cast<float>(v));
      return;
    case DType::kF16:
      static_cast<f16*>(base)[i] = FloatToF16(static_cast<float>(v));
      return;
    case DType::kI32:
      static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v);
      return;
    case DType::kI64:
      static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v);
      return;
    case DType::kBool:
      static_cast<uint8_t*>(base)[i] = v != 0.0;
      return;
  }
}

}  // namespace cctune
