// Decode GEMV (see kernels.h): one warp per output column j of out[m, n] = x[m, k] · w[n, k]ᵀ,
// for the few rows of activations of a decode step. Each lane streams 16-byte pieces of w's
// row j (two in flight per iteration) and the matching pieces of every row of x (small: they
// stay in L1/L2), accumulating m sums in f32; a warp reduction, then one rounding into out's
// dtype after the bias. Rows or pointers not 16-byte aligned take the element-wise loop.
#include "kernels/cuda/device_helpers.cuh"

namespace cctune {
namespace cuda {
namespace {

constexpr int kGemvWarps = 8;  // output columns per block

// f16 bits -> f32, exact: the conversion instruction on the GPU, core's bit pattern elsewhere.
__device__ __forceinline__ float HalfToF(uint16_t h) {
#if defined(__CUDA_ARCH__)
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
#else
  return F16BitsToFloat(h);
#endif
}

// One element of dtype D (kDtF32, kDtBF16, kDtF16) at p[i], as f32.
template <int D>
__device__ __forceinline__ float Elem(const void* p, int64_t i) {
  if (D == kDtF32) return static_cast<const float*>(p)[i];
  const uint16_t b = static_cast<const uint16_t*>(p)[i];
  return D == kDtBF16 ? Bf16BitsToFloat(b) : HalfToF(b);
}

// The 16 bytes of a piece as f32 values: 4 of f32, 8 of bf16 / f16.
template <int D>
struct Piece {
  static constexpr int kN = D == kDtF32 ? 4 : 8;
};

template <int D>
__device__ __forceinline__ void Unpack(const uint4& u, float* f) {
  const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (D == kDtF32) {
      f[i] = __uint_as_float(w[i]);
    } else if (D == kDtBF16) {
      f[2 * i] = __uint_as_float(w[i] << 16);
      f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    } else {
      f[2 * i] = HalfToF(static_cast<uint16_t>(w[i] & 0xffffu));
      f[2 * i + 1] = HalfToF(static_cast<uint16_t>(w[i] >> 16));
    }
  }
}

struct GemvArgs {
  int64_t n, k;
  const void* x;
  int64_t ldx;
  const void* w;
  int64_t ldw;
  const void* bias;
  int bias_dtype;
  void* out;
  int out_dtype;
  int64_t ldo;
  bool vec;  // rows and pointers 16-byte aligned
};

template <int D, int R>
__device__ __forceinline__ void FmaPiece(float (&acc)[R], const uint4& wp, const GemvArgs& a,
                                         int64_t piece) {
  constexpr int kN = Piece<D>::kN;
  float wf[kN];
  Unpack<D>(wp, wf);
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t elem_size = D == kDtF32 ? 4 : 2;
    const uint4 xp = *reinterpret_cast<const uint4*>(static_cast<const char*>(a.x) +
                                                     (r * a.ldx + piece * kN) * elem_size);
    float xf[kN];
    Unpack<D>(xp, xf);
#pragma unroll
    for (int e = 0; e < kN; ++e) acc[r] = fmaf(wf[e], xf[e], acc[r]);
  }
}

template <int D, int R>
__global__ void __launch_bounds__(32 * kGemvWarps) GemvKernel(GemvArgs a) {
  const int lane = threadIdx.x & 31;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kGemvWarps + (threadIdx.x >> 5);
  if (j >= a.n) return;
  const int64_t elem_size = D == kDtF32 ? 4 : 2;
  const char* wrow = static_cast<const char*>(a.w) + j * a.ldw * elem_size;
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.f;
  int64_t done = 0;
  if (a.vec) {
    constexpr int kN = Piece<D>::kN;
    const int64_t pieces = a.k / kN;
    const uint4* w4 = reinterpret_cast<const uint4*>(wrow);
    int64_t p = lane;
    for (; p + 32 < pieces; p += 64) {
      const uint4 w0 = w4[p], w1 = w4[p + 32];
      FmaPiece<D, R>(acc, w0, a, p);
      FmaPiece<D, R>(acc, w1, a, p + 32);
    }
    if (p < pieces) FmaPiece<D, R>(acc, w4[p], a, p);
    done = pieces * kN;
  }
  for (int64_t t = done + lane; t < a.k; t += 32) {
    const float wv = Elem<D>(wrow, t);
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = fmaf(wv, Elem<D>(a.x, r * a.ldx + t), acc[r]);
  }
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = WarpSum(acc[r]);
  if (lane == 0) {
    const float b = a.bias != nullptr ? LoadF(a.bias, j, a.bias_dtype) : 0.f;
#pragma unroll
    for (int r = 0; r < R; ++r) StoreF(a.out, r * a.ldo + j, a.out_dtype, acc[r] + b);
  }
}

template <int D, int R>
void LaunchRows(const GemvArgs& a, cudaStream_t stream) {
  const int64_t blocks = (a.n + kGemvWarps - 1) / kGemvWarps;
  GemvKernel<D, R><<<static_cast<unsigned>(blocks), 32 * kGemvWarps, 0, stream>>>(a);
}

template <int D>
void LaunchDtype(int64_t m, const GemvArgs& a, cudaStream_t stream) {
  switch (m) {
    case 1: return LaunchRows<D, 1>(a, stream);
    case 2: return LaunchRows<D, 2>(a, stream);
    case 3: return LaunchRows<D, 3>(a, stream);
    case 4: return LaunchRows<D, 4>(a, stream);
    case 5: return LaunchRows<D, 5>(a, stream);
    case 6: return LaunchRows<D, 6>(a, stream);
    case 7: return LaunchRows<D, 7>(a, stream);
    default: return LaunchRows<D, 8>(a, stream);
  }
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

cudaError_t LaunchGemv(int64_t m, int64_t n, int64_t k, int dtype, const void* x, int64_t ldx,
                       const void* w, int64_t ldw, const void* bias, int bias_dtype, void* out,
                       int out_dtype, int64_t ldo, cudaStream_t stream) {
  if (m <= 0 || n <= 0) return cudaSuccess;
  if (m > kGemvMaxRows || n > (int64_t{1} << 31) * kGemvWarps ||
      !IsFloatingCodeHost(dtype) || !IsFloatingCodeHost(out_dtype) ||
      (bias != nullptr && !IsFloatingCodeHost(bias_dtype))) {
    return cudaErrorInvalidValue;
  }
  const int64_t es = dtype == kDtF32 ? 4 : 2;
  GemvArgs a{n, k, x, ldx, w, ldw, bias, bias_dtype, out, out_dtype, ldo, false};
  a.vec = Aligned16(x) && Aligned16(w) && (ldx * es) % 16 == 0 && (ldw * es) % 16 == 0;
  switch (dtype) {
    case kDtF32:
      LaunchDtype<kDtF32>(m, a, stream);
      break;
    case kDtBF16:
      LaunchDtype<kDtBF16>(m, a, stream);
      break;
    default:
      LaunchDtype<kDtF16>(m, a, stream);
      break;
  }
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace cctune
