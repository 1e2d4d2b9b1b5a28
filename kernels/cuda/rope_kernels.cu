// RoPE: the cos/sin tables and the rotation, for both feature pairings.
#include "kernels/cuda/device_helpers.cuh"
#include "kernels/cuda/kernels.h"

namespace cctune {
namespace cuda {
namespace {

__global__ void RopeCacheKernel(CuTensor cos_t, CuTensor sin_t, CuTensor inv, int64_t n) {
  const int64_t half = cos_t.shape[1];
  const float* inv_freq = static_cast<const float*>(inv.data);
  float* c = static_cast<float*>(cos_t.data);
  float* s = static_cast<float*>(sin_t.data);
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < n;
       idx += step) {
    const int64_t p = idx / half, i = idx - p * half;
    // The angle is rounded to f32 first (torchtune's f32 outer product); its cos/sin are taken
    // in f64 and rounded once, like the CPU backend (the table is built once, so f64 is cheap).
    const float angle = __fmul_rn(static_cast<float>(p), inv_freq[i * inv.strides[0]]);
    double sv, cv;
    sincos(static_cast<double>(angle), &sv, &cv);
    c[p * cos_t.strides[0] + i * cos_t.strides[1]] = static_cast<float>(cv);
    s[p * sin_t.strides[0] + i * sin_t.strides[1]] = static_cast<float>(sv);
  }
}

// One thread per rotated pair: (b, s, n, i) with i in [0, h_d/2).
__global__ void RopeKernel(CuTensor out, CuTensor x, CuTensor cos_t, CuTensor sin_t, CuTensor pos,
                           bool interleaved, int64_t n) {
  const int64_t S = x.shape[1], H = x.shape[2], half = x.shape[3] / 2;
  const int64_t max_seq = cos_t.shape[0];
  const int64_t ps_b = pos.ndim == 2 ? pos.strides[0] : 0;
  const int64_t ps_s = pos.strides[pos.ndim - 1];
  const float* c = static_cast<const float*>(cos_t.data);
  const float* s = static_cast<const float*>(sin_t.data);
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < n;
       idx += step) {
    int64_t t = idx;
    const int64_t i = t % half;
    t /= half;
    const int64_t h = t % H;
    t /= H;
    const int64_t si = t % S;
    const int64_t bi = t / S;
    const int64_t xb = bi * x.strides[0] + si * x.strides[1] + h * x.strides[2];
    const int64_t ob = bi * out.strides[0] + si * out.strides[1] + h * out.strides[2];
    const int64_t j0 = interleaved ? 2 * i : i;
    const int64_t j1 = interleaved ? 2 * i + 1 : i + half;
    const long long p = LoadI(pos.data, bi * ps_b + si * ps_s, pos.dtype);
    const float x0 = LoadF(x.data, xb + j0 * x.strides[3], x.dtype);
    const float x1 = LoadF(x.data, xb + j1 * x.strides[3], x.dtype);
    float y0, y1;
    if (p < 0 || p >= max_seq) {
      y0 = y1 = NAN;  // ops.cc cannot cheaply check device positions; make the bug visible
    } else {
      const float cv = c[p * cos_t.strides[0] + i * cos_t.strides[1]];
      const float sv = s[p * sin_t.strides[0] + i * sin_t.strides[1]];
      y0 = x0 * cv - x1 * sv;
      y1 = x1 * cv + x0 * sv;
    }
    StoreF(out.data, ob + j0 * out.strides[3], out.dtype, y0);
    StoreF(out.data, ob + j1 * out.strides[3], out.dtype, y1);
  }
}

}  // namespace

cudaError_t LaunchRopeCache(const CuTensor& cos, const CuTensor& sin, const CuTensor& inv_freq,
                            cudaStream_t stream) {
  const int64_t n = cos.numel();
  if (n == 0) return cudaSuccess;
  RopeCacheKernel<<<GridFor(n), kThreads, 0, stream>>>(cos, sin, inv_freq, n);
  return cudaGetLastError();
}

cudaError_t LaunchRope(const CuTensor& out, const CuTensor& x, const CuTensor& cos,
                       const CuTensor& sin, const CuTensor& positions, bool interleaved,
                       cudaStream_t stream) {
  const int64_t n = x.numel() / 2;
  if (n == 0) return cudaSuccess;
  RopeKernel<<<GridFor(n), kThreads, 0, stream>>>(out, x, cos, sin, positions, interleaved, n);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace cctune
