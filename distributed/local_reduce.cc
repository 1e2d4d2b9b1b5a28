#include "distributed/local_reduce.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace cctune {
namespace {

// Elements per pass: a double accumulator block that stays in L1.
constexpr int64_t kBlock = 1024;

// Double to T with one rounding: via float is exact for f32; for bf16/f16 a double-to-float
// step first would round twice, so those go through a correctly rounded helper.
template <typename T>
T FromD(double x) {
  return FromFloat<T>(static_cast<float>(x));
}
// bf16/f16 from double: round to float toward zero with a sticky bit (round-to-odd), which
// makes the second rounding (float to 16 bits, nearest even) the correct rounding of x.
float RoundToOddFloat(double x) {
  float f = static_cast<float>(x);  // nearest
  if (!std::isfinite(f) || static_cast<double>(f) == x) return f;
  // Step toward zero when nearest overshot, then force the last bit to 1 (inexact: odd).
  if (std::fabs(static_cast<double>(f)) > std::fabs(x)) f = std::nextafter(f, 0.0f);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u |= 1u;
  std::memcpy(&f, &u, 4);
  return f;
}
template <>
bf16 FromD<bf16>(double x) {
  return FloatToBf16(RoundToOddFloat(x));
}
template <>
f16 FromD<f16>(double x) {
  return FloatToF16(RoundToOddFloat(x));
}

template <typename T>
void ReduceFloat(const T* blocks, int nblocks, int64_t stride, int64_t count, ReduceOp op,
                 T* out) {
  double acc[kBlock];
  for (int64_t start = 0; start < count; start += kBlock) {
    const int64_t len = std::min(kBlock, count - start);
    if (op == ReduceOp::kMax) {
      float* m = reinterpret_cast<float*>(acc);  // len floats fit in the block
      for (int64_t i = 0; i < len; ++i) m[i] = ToFloat(blocks[start + i]);
      for (int r = 1; r < nblocks; ++r) {
        const T* b = blocks + r * stride + start;
        for (int64_t i = 0; i < len; ++i) {
          const float x = ToFloat(b[i]);
          if (x > m[i] || std::isnan(x)) m[i] = std::isnan(m[i]) ? m[i] : x;
        }
      }
      for (int64_t i = 0; i < len; ++i) out[start + i] = FromFloat<T>(m[i]);
      continue;
    }
    for (int64_t i = 0; i < len; ++i) acc[i] = ToFloat(blocks[start + i]);
    for (int r = 1; r < nblocks; ++r) {
      const T* b = blocks + r * stride + start;
      for (int64_t i = 0; i < len; ++i) acc[i] += ToFloat(b[i]);
    }
    if (op == ReduceOp::kAvg) {
      for (int64_t i = 0; i < len; ++i) acc[i] /= nblocks;
    }
    for (int64_t i = 0; i < len; ++i) out[start + i] = FromD<T>(acc[i]);
  }
}

template <typename T, typename U>
void ReduceInt(const T* blocks, int nblocks, int64_t stride, int64_t count, ReduceOp op, T* out) {
  for (int64_t i = 0; i < count; ++i) {
    T v = blocks[i];
    U sum = static_cast<U>(v);
    for (int r = 1; r < nblocks; ++r) {
      const T x = blocks[r * stride + i];
      if (op == ReduceOp::kMax) {
        v = std::max(v, x);
      } else {
        sum += static_cast<U>(x);
      }
    }
    out[i] = op == ReduceOp::kMax ? v : static_cast<T>(sum);
  }
}

}  // namespace

absl::Status ValidateReduce(const char* collective, DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::kF32:
    case DType::kBF16:
    case DType::kF16:
      return absl::OkStatus();
    case DType::kI32:
    case DType::kI64:
      if (op != ReduceOp::kAvg) return absl::OkStatus();
      return absl::InvalidArgumentError(absl::StrCat(
          collective, ": avg of a ", DTypeName(dtype),
          " tensor is not defined (sum it and divide, or convert to f32 first)"));
    default:
      return absl::InvalidArgumentError(absl::StrCat(collective, ": ", ReduceOpName(op),
                                                     " of a ", DTypeName(dtype),
                                                     " tensor is not supported"));
  }
}

void ReduceBlocks(const void* blocks, int nblocks, int64_t stride, int64_t count, DType dtype,
                  ReduceOp op, void* out) {
  switch (dtype) {
    case DType::kF32:
      return ReduceFloat(static_cast<const float*>(blocks), nblocks, stride, count, op,
                         static_cast<float*>(out));
    case DType::kBF16:
      return ReduceFloat(static_cast<const bf16*>(blocks), nblocks, stride, count, op,
                         static_cast<bf16*>(out));
    case DType::kF16:
      return ReduceFloat(static_cast<const f16*>(blocks), nblocks, stride, count, op,
                         static_cast<f16*>(out));
    case DType::kI32:
      return ReduceInt<int32_t, uint32_t>(static_cast<const int32_t*>(blocks), nblocks, stride,
                                          count, op, static_cast<int32_t*>(out));
    case DType::kI64:
      return ReduceInt<int64_t, uint64_t>(static_cast<const int64_t*>(blocks), nblocks, stride,
                                          count, op, static_cast<int64_t*>(out));
    default:
      return;
  }
}

}  // namespace cctune
