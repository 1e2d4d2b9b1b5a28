// Optimizer updates (AdamW, SGD) and the fp64 squared norm behind the global gradient norm.
// The updates are element-wise grid-stride loops; the norm is a two-pass deterministic
// reduction (per-chunk fp64 partials, then one block), with no atomics.
#include "kernels/cuda/device_helpers.cuh"
#include "kernels/cuda/kernels.h"

namespace cctune {
namespace cuda {
namespace {

// Elements per partial sum of the squared norm (the CPU backend's chunk).
constexpr int64_t kNormChunk = 1 << 14;
constexpr int kNormThreads = 256;
constexpr int kFinalThreads = 1024;

__global__ void AdamWKernel(float* __restrict__ p, uint16_t* __restrict__ out,
                            const float* __restrict__ g, float* __restrict__ m,
                            float* __restrict__ v, int64_t n, AdamWArgs a) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += stride) {
    const float gk = g[k], mo = m[k];
    // torch's lerp picks its formula by the weight.
    const float mk = a.lerp_low ? mo + a.w1 * (gk - mo) : gk - (gk - mo) * (1.0f - a.w1);
    const float vk = v[k] * a.beta2 + a.w2 * gk * gk;
    const float denom = sqrtf(vk) / a.bc2_sqrt + a.eps;
    m[k] = mk;
    v[k] = vk;
    const float pk = p[k] * a.decay - a.step_size * (mk / denom);
    p[k] = pk;
    if (out != nullptr) out[k] = FloatToBf16Bits(pk);
  }
}

// torch's roundings: each `x.add(y, alpha=a)` one fused multiply-add, each mul_ on its own.
__global__ void SgdKernel(float* __restrict__ p, uint16_t* __restrict__ out,
                          const float* __restrict__ g, float* __restrict__ buf, int64_t n,
                          SgdArgs a) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += stride) {
    const float pk = p[k];
    float d = a.decay ? fmaf(pk, a.wd, g[k]) : g[k];
    if (a.momentum) {
      const float bk = a.first ? d : fmaf(d, a.keep, __fmul_rn(buf[k], a.mu));
      buf[k] = bk;
      d = a.nesterov ? fmaf(bk, a.mu, d) : bk;
    }
    const float np = fmaf(d, -a.lr, pk);
    p[k] = np;
    if (out != nullptr) out[k] = FloatToBf16Bits(np);
  }
}

__device__ __forceinline__ double WarpSumD(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block in a fixed order, returned to every thread. `scratch` holds >= 32
// doubles; blockDim.x is a multiple of 32.
__device__ __forceinline__ double BlockSumD(double v, double* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = WarpSumD(v);
  __syncthreads();  // protects scratch from a previous call's readers
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const double t = lane < nwarps ? scratch[lane] : 0.0;
  return WarpSumD(t);
}

// partial[c] = sum of x² over chunk c; blocks stride over the chunks.
__global__ void ChunkSquaresKernel(double* __restrict__ partial, const float* __restrict__ x,
                                   int64_t n, int64_t chunks) {
  __shared__ double scratch[32];
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const int64_t begin = c * kNormChunk;
    const int64_t end = begin + kNormChunk < n ? begin + kNormChunk : n;
    double s = 0.0;
    for (int64_t k = begin + threadIdx.x; k < end; k += blockDim.x) {
      const double xk = static_cast<double>(x[k]);
      s += xk * xk;
    }
    s = BlockSumD(s, scratch);
    if (threadIdx.x == 0) partial[c] = s;
  }
}

// *result = sum of partial[0, count), by one block: thread t adds partial[t + j·blockDim.x]
// in order of j, then the block tree.
__global__ void SumPartialsKernel(double* __restrict__ result,
                                  const double* __restrict__ partial, int64_t count) {
  __shared__ double scratch[32];
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) s += partial[i];
  s = BlockSumD(s, scratch);
  if (threadIdx.x == 0) *result = s;
}

}  // namespace

cudaError_t LaunchAdamW(float* p, uint16_t* out_bf16, const float* g, float* m, float* v,
                        int64_t n, const AdamWArgs& args, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  AdamWKernel<<<GridFor(n), kThreads, 0, stream>>>(p, out_bf16, g, m, v, n, args);
  return cudaGetLastError();
}

cudaError_t LaunchSgd(float* p, uint16_t* out_bf16, const float* g, float* buf, int64_t n,
                      const SgdArgs& args, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (args.momentum && buf == nullptr) return cudaErrorInvalidValue;
  SgdKernel<<<GridFor(n), kThreads, 0, stream>>>(p, out_bf16, g, buf, n, args);
  return cudaGetLastError();
}

size_t SquaredNormWorkspaceBytes(int64_t n) {
  const int64_t chunks = n > 0 ? (n + kNormChunk - 1) / kNormChunk : 0;
  return static_cast<size_t>(chunks) * sizeof(double);
}

cudaError_t LaunchSquaredNorm(double* result, const float* x, int64_t n, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
  const int64_t chunks = n > 0 ? (n + kNormChunk - 1) / kNormChunk : 0;
  if (workspace_bytes < SquaredNormWorkspaceBytes(n)) return cudaErrorInvalidValue;
  double* partial = static_cast<double*>(workspace);
  if (chunks > 0) {
    const unsigned grid = static_cast<unsigned>(chunks < kMaxBlocks ? chunks : kMaxBlocks);
    ChunkSquaresKernel<<<grid, kNormThreads, 0, stream>>>(partial, x, n, chunks);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  SumPartialsKernel<<<1, kFinalThreads, 0, stream>>>(result, partial, chunks);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace cctune
