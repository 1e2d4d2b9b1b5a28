// Scaled dot-product attention with grouped KV heads, read in place (no K/V copies).
//
// One block per (batch, query head, query row) runs an online softmax over key tiles: each
// warp scores a few keys of the tile, then every thread rescales and accumulates its own
// output features. When there are too few rows to fill the GPU (decode: s_q == 1), the keys
// are split across blocks (grid.y) that write partial (max, sum, acc) rows, and a second
// kernel merges them (flash-decoding). When AttentionArgs::lse is set (training), the row's
// log-sum-exp m + log(l) is written too.
#include "kernels/cuda/device_helpers.cuh"
#include "kernels/cuda/kernels.h"

namespace cctune {
namespace cuda {
namespace {

constexpr int kAttnThreads = 128;
constexpr int kAttnTile = 32;  // keys per tile; <= kAttnThreads

template <bool kSplit>
__global__ void __launch_bounds__(kAttnThreads)
    AttentionKernel(AttentionArgs a, int64_t chunk, float* ws) {
  extern __shared__ float smem[];
  __shared__ float s_s[kAttnTile];
  __shared__ float p_s[kAttnTile];
  const CuTensor& q = a.q;
  const CuTensor& k = a.k;
  const CuTensor& v = a.v;
  const int64_t nh = q.shape[1], sq = q.shape[2], hd = q.shape[3];
  const int64_t nkv = k.shape[1], skv = k.shape[2];
  float* q_s = smem;       // [hd] the query row times the scale, f32
  float* acc = smem + hd;  // [hd] running weighted sum of V; thread t owns d = t mod blockDim

  const int64_t row = blockIdx.x;
  const int split = blockIdx.y;
  const int64_t qi = row % sq;
  const int64_t hi = (row / sq) % nh;
  const int64_t bi = row / (sq * nh);
  const int64_t kvh = hi / (nh / nkv);

  int64_t kv_end = skv;
  if (a.causal) {
    const int64_t limit = skv - sq + qi + 1;
    if (limit < kv_end) kv_end = limit;
  }
  const int64_t start = split * chunk;
  int64_t end = start + chunk;
  if (end > kv_end) end = kv_end;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
  const int64_t qb = bi * q.strides[0] + hi * q.strides[1] + qi * q.strides[2];
  for (int64_t d = tid; d < hd; d += blockDim.x) {
    q_s[d] = LoadF(q.data, qb + d * q.strides[3], q.dtype) * a.scale;  // (scale q) . k
    acc[d] = 0.f;
  }
  __syncthreads();

  const int64_t kb = bi * k.strides[0] + kvh * k.strides[1];
  const int64_t vb = bi * v.strides[0] + kvh * v.strides[1];
  const uint8_t* mask = static_cast<const uint8_t*>(a.mask.data);
  const int64_t mb = mask ? bi * a.mask.strides[0] + qi * a.mask.strides[1] : 0;
  float m = -INFINITY, l = 0.f;

  for (int64_t tile = start; tile < end; tile += kAttnTile) {
    for (int jj = warp; jj < kAttnTile; jj += nwarps) {
      const int64_t j = tile + jj;
      float sc = -INFINITY;
      if (j < end && (mask == nullptr || mask[mb + j * a.mask.strides[2]])) {
        const int64_t kr = kb + j * k.strides[2];
        float part = 0.f;
        for (int64_t d = lane; d < hd; d += 32) {
          part += q_s[d] * LoadF(k.data, kr + d * k.strides[3], k.dtype);
        }
        sc = WarpSum(part);
      }
      if (lane == 0) s_s[jj] = sc;
    }
    __syncthreads();
    float tmax = -INFINITY;
#pragma unroll
    for (int jj = 0; jj < kAttnTile; ++jj) tmax = fmaxf(tmax, s_s[jj]);
    const float m_new = fmaxf(m, tmax);
    if (m_new != -INFINITY) {                // the same for every thread of the block
      const float factor = expf(m - m_new);  // 0 while m is still -inf
      if (tid < kAttnTile) p_s[tid] = expf(s_s[tid] - m_new);
      __syncthreads();
      float psum = 0.f;
#pragma unroll
      for (int jj = 0; jj < kAttnTile; ++jj) psum += p_s[jj];
      l = l * factor + psum;
      for (int64_t d = tid; d < hd; d += blockDim.x) {
        float ad = acc[d] * factor;
        for (int jj = 0; jj < kAttnTile; ++jj) {
          const float p = p_s[jj];
          // p is exactly 0 for masked keys and keys past `end`, whose V must not be read.
          if (p != 0.f) {
            ad += p * LoadF(v.data, vb + (tile + jj) * v.strides[2] + d * v.strides[3], v.dtype);
          }
        }
        acc[d] = ad;
      }
      m = m_new;
    }
    __syncthreads();
  }

  if (!kSplit) {
    const CuTensor& o = a.out;
    const int64_t ob = bi * o.strides[0] + hi * o.strides[1] + qi * o.strides[2];
    const float inv = l > 0.f ? 1.f / l : 0.f;  // nothing attended: zeros
    for (int64_t d = tid; d < hd; d += blockDim.x) {
      StoreF(o.data, ob + d * o.strides[3], o.dtype, acc[d] * inv);
    }
    if (a.lse.data != nullptr && tid == 0) {
      const CuTensor& ls = a.lse;
      static_cast<float*>(ls.data)[bi * ls.strides[0] + hi * ls.strides[1] + qi * ls.strides[2]] =
          l > 0.f ? m + logf(l) : -INFINITY;
    }
  } else {
    float* w = ws + (row * gridDim.y + split) * (hd + 2);
    if (tid == 0) {
      w[0] = m;
      w[1] = l;
    }
    for (int64_t d = tid; d < hd; d += blockDim.x) w[2 + d] = acc[d];
  }
}

// Merges the per-split partials of one row: out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M).
// Writes the row's log-sum-exp M + log(total) to lse when lse.data is set.
__global__ void AttentionCombineKernel(CuTensor o, CuTensor lse, const float* ws, int num_splits) {
  const int64_t nh = o.shape[1], sq = o.shape[2], hd = o.shape[3];
  const int64_t row = blockIdx.x;
  const int64_t qi = row % sq;
  const int64_t hi = (row / sq) % nh;
  const int64_t bi = row / (sq * nh);
  const float* w = ws + row * num_splits * (hd + 2);
  float mx = -INFINITY;
  for (int s = 0; s < num_splits; ++s) mx = fmaxf(mx, w[s * (hd + 2)]);
  float total = 0.f;
  if (mx != -INFINITY) {
    for (int s = 0; s < num_splits; ++s) {
      const float ms = w[s * (hd + 2)];
      if (ms != -INFINITY) total += w[s * (hd + 2) + 1] * expf(ms - mx);
    }
  }
  const float inv = total > 0.f ? 1.f / total : 0.f;
  const int64_t ob = bi * o.strides[0] + hi * o.strides[1] + qi * o.strides[2];
  for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) {
    float sum = 0.f;
    if (mx != -INFINITY) {
      for (int s = 0; s < num_splits; ++s) {
        const float ms = w[s * (hd + 2)];
        if (ms != -INFINITY) sum += w[s * (hd + 2) + 2 + d] * expf(ms - mx);
      }
    }
    StoreF(o.data, ob + d * o.strides[3], o.dtype, sum * inv);
  }
  if (lse.data != nullptr && threadIdx.x == 0) {
    static_cast<float*>(lse.data)[bi * lse.strides[0] + hi * lse.strides[1] + qi * lse.strides[2]] =
        total > 0.f ? mx + logf(total) : -INFINITY;
  }
}

int64_t Rows(const AttentionArgs& a) { return a.q.shape[0] * a.q.shape[1] * a.q.shape[2]; }

int64_t ChunkFor(const AttentionArgs& a, int num_splits) {
  const int64_t skv = a.k.shape[2];
  return (skv + num_splits - 1) / num_splits;
}

}  // namespace

int AttentionNumSplits(const AttentionArgs& a, int num_sms) {
  const int64_t rows = Rows(a), skv = a.k.shape[2];
  if (num_sms <= 0) num_sms = 1;
  const int64_t target_blocks = 4 * static_cast<int64_t>(num_sms);
  if (rows >= target_blocks / 2 || skv < 512) return 1;
  int64_t splits = (target_blocks + rows - 1) / rows;
  const int64_t max_by_len = skv / 256;  // at least 256 keys per split
  if (splits > max_by_len) splits = max_by_len;
  if (splits > 64) splits = 64;
  return splits < 1 ? 1 : static_cast<int>(splits);
}

size_t AttentionWorkspaceBytes(const AttentionArgs& a, int num_splits) {
  if (num_splits <= 1) return 0;
  return static_cast<size_t>(Rows(a)) * num_splits * (a.q.shape[3] + 2) * sizeof(float);
}

cudaError_t LaunchAttention(const AttentionArgs& a, int num_splits, void* workspace,
                            cudaStream_t stream) {
  const int64_t rows = Rows(a), hd = a.q.shape[3];
  if (rows == 0 || hd == 0) return cudaSuccess;
  if (num_splits < 1) num_splits = 1;
  const size_t smem = 2 * static_cast<size_t>(hd) * sizeof(float);
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(num_splits));
  if (num_splits == 1) {
    AttentionKernel<false><<<grid, kAttnThreads, smem, stream>>>(a, ChunkFor(a, 1), nullptr);
    return cudaGetLastError();
  }
  float* ws = static_cast<float*>(workspace);
  AttentionKernel<true><<<grid, kAttnThreads, smem, stream>>>(a, ChunkFor(a, num_splits), ws);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  AttentionCombineKernel<<<static_cast<unsigned>(rows), kAttnThreads, 0, stream>>>(
      a.out, a.lse, ws, num_splits);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace cctune
