// Device-side helpers shared by the .cu files: dtype loads/stores (bit-identical to core's
// CPU conversions), strided offsets, dimension collapsing and block reductions. nvcc only.
#ifndef CCTUNE_KERNELS_CUDA_DEVICE_HELPERS_CUH_
#define CCTUNE_KERNELS_CUDA_DEVICE_HELPERS_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/kernels.h"

namespace cctune {
namespace cuda {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65536;

inline unsigned GridFor(int64_t n, int threads = kThreads) {
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  return static_cast<unsigned>(blocks);
}

// Row-wise kernels (one block per row, grid-stride over rows): threads per block for rows of
// length d, and the grid for `rows` rows.
inline int RowThreads(int64_t d) {
  if (d >= 4096) return 1024;
  if (d >= 1024) return 512;
  if (d >= 256) return 256;
  return 128;
}

inline unsigned RowGrid(int64_t rows) {
  return static_cast<unsigned>(rows < (1 << 20) ? rows : (1 << 20));
}

// ---- Scalar conversions (same bit patterns as core/dtype.h) ----

__device__ __forceinline__ float Bf16BitsToFloat(uint16_t b) {
  return __uint_as_float(static_cast<uint32_t>(b) << 16);
}

__device__ __forceinline__ uint16_t FloatToBf16Bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

__device__ __forceinline__ float F16BitsToFloat(uint16_t h) {
  const uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {
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
  return __uint_as_float(u);
}

__device__ __forceinline__ uint16_t FloatToF16Bits(float f) {
  const uint32_t u = __float_as_uint(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00;
  if (abs >= 0x477ff000u) return sign | 0x7c00;
  if (abs < 0x38800000u) {
    const float scaled = __uint_as_float(abs) * 16777216.0f;  // exact
    return sign | static_cast<uint16_t>(rintf(scaled));
  }
  uint32_t v = abs - ((127 - 15) << 23);
  v += 0xfffu + ((v >> 13) & 1u);
  return sign | static_cast<uint16_t>(v >> 13);
}

__device__ __forceinline__ bool IsFloatingCode(int dt) {
  return dt == kDtF32 || dt == kDtBF16 || dt == kDtF16;
}

// Element `off` (in elements) of a buffer of dtype `dt`, as f32 (integers: static_cast).
__device__ __forceinline__ float LoadF(const void* base, int64_t off, int dt) {
  switch (dt) {
    case kDtF32:
      return static_cast<const float*>(base)[off];
    case kDtBF16:
      return Bf16BitsToFloat(static_cast<const uint16_t*>(base)[off]);
    case kDtF16:
      return F16BitsToFloat(static_cast<const uint16_t*>(base)[off]);
    case kDtI32:
      return static_cast<float>(static_cast<const int32_t*>(base)[off]);
    case kDtI64:
      return static_cast<float>(static_cast<const long long*>(base)[off]);
    case kDtBool:
      return static_cast<const uint8_t*>(base)[off] ? 1.f : 0.f;
  }
  return 0.f;
}

// Element as int64 (floats truncate through f32, like core's ToI64).
__device__ __forceinline__ long long LoadI(const void* base, int64_t off, int dt) {
  switch (dt) {
    case kDtI32:
      return static_cast<const int32_t*>(base)[off];
    case kDtI64:
      return static_cast<const long long*>(base)[off];
    case kDtBool:
      return static_cast<const uint8_t*>(base)[off] ? 1 : 0;
    default:
      return static_cast<long long>(LoadF(base, off, dt));
  }
}

__device__ __forceinline__ void StoreF(void* base, int64_t off, int dt, float v) {
  switch (dt) {
    case kDtF32:
      static_cast<float*>(base)[off] = v;
      return;
    case kDtBF16:
      static_cast<uint16_t*>(base)[off] = FloatToBf16Bits(v);
      return;
    case kDtF16:
      static_cast<uint16_t*>(base)[off] = FloatToF16Bits(v);
      return;
    case kDtI32:
      static_cast<int32_t*>(base)[off] = static_cast<int32_t>(static_cast<long long>(v));
      return;
    case kDtI64:
      static_cast<long long*>(base)[off] = static_cast<long long>(v);
      return;
    case kDtBool:
      static_cast<uint8_t*>(base)[off] = v != 0.f;
      return;
  }
}

__device__ __forceinline__ void StoreI(void* base, int64_t off, int dt, long long v) {
  switch (dt) {
    case kDtF32:
      static_cast<float*>(base)[off] = static_cast<float>(v);
      return;
    case kDtBF16:
      static_cast<uint16_t*>(base)[off] = FloatToBf16Bits(static_cast<float>(v));
      return;
    case kDtF16:
      static_cast<uint16_t*>(base)[off] = FloatToF16Bits(static_cast<float>(v));
      return;
    case kDtI32:
      static_cast<int32_t*>(base)[off] = static_cast<int32_t>(v);
      return;
    case kDtI64:
      static_cast<long long*>(base)[off] = v;
      return;
    case kDtBool:
      static_cast<uint8_t*>(base)[off] = v != 0;
      return;
  }
}

// Rounds an f32 to what a `dt` store then load would give (identity for f32).
__device__ __forceinline__ float RoundTo(float v, int dt) {
  if (dt == kDtBF16) return Bf16BitsToFloat(FloatToBf16Bits(v));
  if (dt == kDtF16) return F16BitsToFloat(FloatToF16Bits(v));
  return v;
}

// ---- Strided offsets ----

// Offset (elements) of linear index i of `t`'s row-major enumeration over dims [0, ndim).
__device__ __forceinline__ int64_t OffsetOf(const CuTensor& t, int ndim, int64_t i) {
  int64_t off = 0;
#pragma unroll
  for (int d = kCuMaxDims - 1; d >= 0; --d) {
    if (d < ndim) {
      const int64_t s = t.shape[d];
      const int64_t q = i / s;
      off += (i - q * s) * t.strides[d];
      i = q;
    }
  }
  return off;
}

// Offset of row r of `t` where rows enumerate all dims but the last.
__device__ __forceinline__ int64_t RowOffset(const CuTensor& t, int64_t r) {
  return OffsetOf(t, t.ndim - 1, r);
}

// Merges dimensions that are contiguous in every operand and drops size-1 dims. All operands
// share one shape (the shape of ops[0]); only strides differ. Keeps at least one dim.
inline void CollapseDims(CuTensor* ops, int count) {
  CuTensor& ref = ops[0];
  int64_t shape[kCuMaxDims];
  int64_t strides[4][kCuMaxDims];
  int nd = 0;
  for (int d = 0; d < ref.ndim; ++d) {
    if (ref.shape[d] == 1) continue;
    bool merge = nd > 0;
    for (int o = 0; o < count && merge; ++o) {
      merge = strides[o][nd - 1] == ops[o].strides[d] * ref.shape[d];
    }
    if (merge) {
      shape[nd - 1] *= ref.shape[d];
      for (int o = 0; o < count; ++o) strides[o][nd - 1] = ops[o].strides[d];
    } else {
      shape[nd] = ref.shape[d];
      for (int o = 0; o < count; ++o) strides[o][nd] = ops[o].strides[d];
      ++nd;
    }
  }
  if (nd == 0) {
    shape[0] = 1;
    for (int o = 0; o < count; ++o) strides[o][0] = 1;
    nd = 1;
  }
  for (int o = 0; o < count; ++o) {
    ops[o].ndim = nd;
    for (int d = 0; d < nd; ++d) {
      ops[o].shape[d] = shape[d];
      ops[o].strides[d] = strides[o][d];
    }
  }
}

inline bool IsDense1D(const CuTensor& t) { return t.ndim == 1 && t.strides[0] == 1; }

inline bool IsFloatingCodeHost(int dt) { return dt == kDtF32 || dt == kDtBF16 || dt == kDtF16; }

// ---- Reductions ----

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block, returned to every thread. `scratch` holds >= 32 floats; blockDim.x is a
// multiple of 32. Synchronises; safe to call repeatedly with the same scratch.
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = WarpSum(v);
  __syncthreads();  // protects scratch from a previous call's readers
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float t = lane < nwarps ? scratch[lane] : 0.f;
  return WarpSum(t);
}

__device__ __forceinline__ float BlockMax(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float t = lane < nwarps ? scratch[lane] : -INFINITY;
  return WarpMax(t);
}

}  // namespace cuda
}  // namespace cctune

#endif  // CCTUNE_KERNELS_CUDA_DEVICE_HELPERS_CUH_
