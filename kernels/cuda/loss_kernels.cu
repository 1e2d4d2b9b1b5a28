// Cross-entropy forward and backward over logits [n, v]: one block per row (the row's max and
// sum of exponentials are block reductions), then the forward's rows are summed by one block
// in fp64. Every sum has an order fixed by the shapes, so the loss is bit-reproducible.
#include "kernels/cuda/device_helpers.cuh"
#include "kernels/cuda/kernels.h"

namespace cctune {
namespace cuda {
namespace {

// Max and sum of exp(x - max) over row `xo` of logits (v elements at stride xs).
__device__ __forceinline__ void RowStats(const CuTensor& logits, int64_t xo, int64_t xs, int64_t v,
                                         float* scratch, float* mx_out, float* sum_out) {
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
    m = fmaxf(m, LoadF(logits.data, xo + j * xs, logits.dtype));
  }
  m = BlockMax(m, scratch);
  float s = 0.f;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
    s += expf(LoadF(logits.data, xo + j * xs, logits.dtype) - m);
  }
  s = BlockSum(s, scratch);  // every read of the row is done past this point
  *mx_out = m;
  *sum_out = s;
}

__global__ void CrossEntropyRowsKernel(CuTensor logits, CuTensor targets, float* row_loss,
                                       int64_t rl_stride, int64_t ignore_index, int64_t n,
                                       int64_t v) {
  __shared__ float scratch[32];
  const int64_t s0 = logits.strides[0], s1 = logits.strides[1], ts = targets.strides[0];
  for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
    const long long t = LoadI(targets.data, r * ts, targets.dtype);  // block-uniform
    if (t == ignore_index) {
      if (threadIdx.x == 0) row_loss[r * rl_stride] = 0.f;
      continue;
    }
    float m, s;
    RowStats(logits, r * s0, s1, v, scratch, &m, &s);
    if (threadIdx.x == 0) {
      // The host rejects targets outside [0, v); NaN makes a missed one visible.
      row_loss[r * rl_stride] =
          t >= 0 && t < v ? m + logf(s) - LoadF(logits.data, r * s0 + t * s1, logits.dtype) : NAN;
    }
  }
}

constexpr int kSumThreads = 256;

// One block: thread i sums rows i, i + 256, ... in fp64, then a fixed tree over the threads.
__global__ void CrossEntropySumKernel(const float* row_loss, int64_t rl_stride, CuTensor targets,
                                      int64_t ignore_index, int64_t n, float* loss_sum,
                                      long long* num_valid) {
  __shared__ double sums[kSumThreads];
  __shared__ long long counts[kSumThreads];
  const int tid = threadIdx.x;
  const int64_t ts = targets.strides[0];
  double total = 0.0;
  long long count = 0;
  for (int64_t r = tid; r < n; r += kSumThreads) {
    if (LoadI(targets.data, r * ts, targets.dtype) == ignore_index) continue;
    total += row_loss[r * rl_stride];
    ++count;
  }
  sums[tid] = total;
  counts[tid] = count;
  __syncthreads();
  for (int half = kSumThreads / 2; half > 0; half >>= 1) {
    if (tid < half) {
      sums[tid] += sums[tid + half];
      counts[tid] += counts[tid + half];
    }
    __syncthreads();
  }
  if (tid == 0) {
    *loss_sum = static_cast<float>(sums[0]);
    *num_valid = counts[0];
  }
}

__global__ void CrossEntropyBackwardKernel(CuTensor dlogits, CuTensor logits, CuTensor targets,
                                           float scale, int64_t ignore_index, int64_t n,
                                           int64_t v) {
  __shared__ float scratch[32];
  const int64_t s0 = logits.strides[0], s1 = logits.strides[1], ts = targets.strides[0];
  const int64_t d0 = dlogits.strides[0], d1 = dlogits.strides[1];
  float* d = static_cast<float*>(dlogits.data);
  for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
    const long long t = LoadI(targets.data, r * ts, targets.dtype);  // block-uniform
    if (t == ignore_index) {
      for (int64_t j = threadIdx.x; j < v; j += blockDim.x) d[r * d0 + j * d1] = 0.f;
      continue;
    }
    float m, s;
    RowStats(logits, r * s0, s1, v, scratch, &m, &s);
    const float f = scale / s;
    const bool bad = t < 0 || t >= v;  // rejected by the host; NaN makes a missed one visible
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
      // The same thread reads logits[r, j] and writes dlogits[r, j] (they may be one element).
      float g = expf(LoadF(logits.data, r * s0 + j * s1, logits.dtype) - m) * f;
      if (j == t) g -= scale;
      d[r * d0 + j * d1] = bad ? NAN : g;
    }
  }
}

}  // namespace

cudaError_t LaunchCrossEntropyForward(const CuTensor& loss_sum, const CuTensor& num_valid,
                                      const CuTensor& row_loss, const CuTensor& logits,
                                      const CuTensor& targets, int64_t ignore_index, float* scratch,
                                      cudaStream_t stream) {
  const int64_t n = logits.shape[0], v = logits.shape[1];
  float* rl = static_cast<float*>(row_loss.data);
  int64_t rl_stride = row_loss.ndim == 1 ? row_loss.strides[0] : 1;
  if (rl == nullptr) {
    rl = scratch;
    rl_stride = 1;
  }
  if (n > 0) {
    if (rl == nullptr) return cudaErrorInvalidValue;
    CrossEntropyRowsKernel<<<RowGrid(n), RowThreads(v), 0, stream>>>(logits, targets, rl, rl_stride,
                                                                     ignore_index, n, v);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  // Also for n == 0: loss_sum = 0 and num_valid = 0.
  CrossEntropySumKernel<<<1, kSumThreads, 0, stream>>>(rl, rl_stride, targets, ignore_index, n,
                                                       static_cast<float*>(loss_sum.data),
                                                       static_cast<long long*>(num_valid.data));
  return cudaGetLastError();
}

cudaError_t LaunchCrossEntropyBackward(const CuTensor& dlogits, const CuTensor& logits,
                                       const CuTensor& targets, float scale, int64_t ignore_index,
                                       cudaStream_t stream) {
  const int64_t n = logits.shape[0], v = logits.shape[1];
  if (n == 0 || v == 0) return cudaSuccess;
  CrossEntropyBackwardKernel<<<RowGrid(n), RowThreads(v), 0, stream>>>(dlogits, logits, targets,
                                                                       scale, ignore_index, n, v);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace cctune
