// Row-wise kernels: RMSNorm and softmax over the last dim. One block per row.
#include "kernels/cuda/device_helpers.cuh"
#include "kernels/cuda/kernels.h"

namespace cctune {
namespace cuda {
namespace {

__global__ void RmsNormKernel(CuTensor out, CuTensor x, CuTensor w, float eps, int64_t rows,
                              int64_t d) {
  __shared__ float scratch[32];
  const int64_t xs = x.strides[x.ndim - 1], os = out.strides[out.ndim - 1];
  const int64_t ws = w.strides[w.ndim - 1];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t xo = RowOffset(x, r), oo = RowOffset(out, r);
    float ss = 0.f;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      const float v = LoadF(x.data, xo + j * xs, x.dtype);
      ss += v * v;
    }
    ss = BlockSum(ss, scratch);
    const float inv = 1.f / sqrtf(ss / static_cast<float>(d) + eps);
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      const float v = RoundTo(LoadF(x.data, xo + j * xs, x.dtype) * inv, x.dtype);
      StoreF(out.data, oo + j * os, out.dtype, v * LoadF(w.data, j * ws, w.dtype));
    }
  }
}

__global__ void SoftmaxKernel(CuTensor out, CuTensor x, int64_t rows, int64_t d) {
  __shared__ float scratch[32];
  const int64_t xs = x.strides[x.ndim - 1], os = out.strides[out.ndim - 1];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t xo = RowOffset(x, r), oo = RowOffset(out, r);
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      m = fmaxf(m, LoadF(x.data, xo + j * xs, x.dtype));
    }
    m = BlockMax(m, scratch);
    float s = 0.f;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      s += expf(LoadF(x.data, xo + j * xs, x.dtype) - m);
    }
    s = BlockSum(s, scratch);  // every read of x in this row is done past this point
    const float inv = 1.f / s;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      const float e = expf(LoadF(x.data, xo + j * xs, x.dtype) - m);
      StoreF(out.data, oo + j * os, out.dtype, e * inv);
    }
    __syncthreads();  // the next row's reads may alias this row's writes only via `out == x`
  }
}

}  // namespace

cudaError_t LaunchRmsNorm(const CuTensor& out, const CuTensor& x, const CuTensor& weight, float eps,
                          cudaStream_t stream) {
  const int64_t d = x.shape[x.ndim - 1];
  const int64_t rows = d == 0 ? 0 : x.numel() / d;
  if (rows == 0) return cudaSuccess;
  RmsNormKernel<<<RowGrid(rows), RowThreads(d), 0, stream>>>(out, x, weight, eps, rows, d);
  return cudaGetLastError();
}

cudaError_t LaunchSoftmax(const CuTensor& out, const CuTensor& x, cudaStream_t stream) {
  const int64_t d = x.shape[x.ndim - 1];
  const int64_t rows = d == 0 ? 0 : x.numel() / d;
  if (rows == 0) return cudaSuccess;
  SoftmaxKernel<<<RowGrid(rows), RowThreads(d), 0, stream>>>(out, x, rows, d);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace cctune
