// Training attention, FlashAttention-2 style on f32 CUDA cores: the forward that also saves
// each row's log-sum-exp (AttnForwardLseKernel, query tiles sharing K/V tiles; the inference
// kernels stay in attention_kernels.cu), and the backward of grouped-head attention.
//
// With P_ij = exp(scale q_i·k_j - lse_i) over the allowed keys and D_i = dy_i·out_i:
//   dS_ij = P_ij (dy_i·v_j - D_i);  dv_j += sum_i P_ij dy_i;  dk_j += scale sum_i dS_ij q_i;
//   dq_i += scale sum_j dS_ij k_j.
// The backward runs three kernels:
//  1. RowStats: one warp per query row copies lse into a dense buffer and computes D (0 for a
//     row with no allowed key, whose lse is -inf: it contributes nothing).
//  2. DkDv: one block per (key tile, kv head, batch) keeps its kBc keys' K and V in shared
//     memory and their dk, dv sums in registers, and walks the query rows of all n_h / n_kv
//     heads sharing the kv head in tiles of kBr rows. Every dk/dv element has one owner, so
//     there are no atomics and the sums run in a fixed order (same bits on every run).
//  3. Dq: one block per (query tile, head, batch) walks the key tiles with dq in registers.
// Tiles are f32 in shared memory (any input dtype and strides are converted on load), rows
// padded by one float so that walking a column touches 32 different banks.
#include "kernels/cuda/device_helpers.cuh"
#include "kernels/cuda/kernels.h"

namespace cctune {
namespace cuda {
namespace {

constexpr int kBwdThreads = 256;
constexpr int kStatsRowsPerBlock = kBwdThreads / 32;  // one warp per row

// Shared-memory layout of one block: q, dy [kBr][kD+1]; k, v [kBc][kD+1]; p, ds [kBr][kBc+1];
// the rows' lse and D [kBr].
template <int kBr, int kBc, int kD>
struct Tiles {
  static constexpr int kPitch = kD + 1;
  static constexpr int kSPitch = kBc + 1;
  static constexpr int kFloats = (2 * kBr + 2 * kBc) * kPitch + 2 * kBr * kSPitch + 2 * kBr;
  static_assert(kFloats * sizeof(float) <= 48 * 1024,
                "tiles must fit the default 48 KiB of dynamic shared memory");
  float* q;
  float* dy;
  float* k;
  float* v;
  float* p;
  float* ds;
  float* lse;
  float* d;
  __device__ explicit Tiles(float* smem) {
    q = smem;
    dy = q + kBr * kPitch;
    k = dy + kBr * kPitch;
    v = k + kBc * kPitch;
    p = v + kBc * kPitch;
    ds = p + kBr * kSPitch;
    lse = ds + kBr * kSPitch;
    d = lse + kBr;
  }
};

// dst[r][e] = t[bi, h, r0 + r, e] as f32 for r < kRows, zeros past row n or feature hd.
template <int kRows, int kD>
__device__ __forceinline__ void LoadRows(float* dst, const CuTensor& t, int64_t bi, int64_t h,
                                         int64_t r0, int64_t n, int64_t hd) {
  const int64_t base = bi * t.strides[0] + h * t.strides[1];
  for (int e = threadIdx.x; e < kRows * kD; e += blockDim.x) {
    const int r = e / kD, c = e % kD;
    const int64_t row = r0 + r;
    float x = 0.f;
    if (row < n && c < hd) x = LoadF(t.data, base + row * t.strides[2] + c * t.strides[3], t.dtype);
    dst[r * (kD + 1) + c] = x;
  }
}

// The rows' lse and D (dense [b, n_h, s_q] buffers); rows past s_q get lse = -inf.
template <int kBr>
__device__ __forceinline__ void LoadRowStats(float* lse_s, float* d_s, const float* row_lse,
                                             const float* row_d, int64_t row0, int64_t i0,
                                             int64_t sq) {
  for (int r = threadIdx.x; r < kBr; r += blockDim.x) {
    const bool in = i0 + r < sq;
    lse_s[r] = in ? row_lse[row0 + r] : -INFINITY;
    d_s[r] = in ? row_d[row0 + r] : 0.f;
  }
}

// P and dS of query rows [i0, i0 + kBr) of batch bi against keys [j0, j0 + kBc), from the
// q, dy, k, v, lse and D tiles; 0 wherever the key is not allowed (past s_kv, causal, mask)
// or the row has no allowed key at all.
template <int kBr, int kBc, int kD, bool kWantP>
__device__ __forceinline__ void ScoreTile(const AttentionBackwardArgs& a,
                                          const Tiles<kBr, kBc, kD>& t, int64_t bi, int64_t i0,
                                          int64_t j0) {
  constexpr int kPitch = Tiles<kBr, kBc, kD>::kPitch;
  constexpr int kSPitch = Tiles<kBr, kBc, kD>::kSPitch;
  const int64_t sq = a.q.shape[2], hd = a.q.shape[3], skv = a.k.shape[2];
  const int64_t shift = skv - sq;  // query i sits at absolute position shift + i
  const uint8_t* mask = static_cast<const uint8_t*>(a.mask.data);
  for (int e = threadIdx.x; e < kBr * kBc; e += blockDim.x) {
    const int r = e / kBc, c = e % kBc;
    const int64_t i = i0 + r, j = j0 + c;
    const float l = t.lse[r];
    bool ok = l != -INFINITY && i < sq && j < skv;
    if (ok && a.causal) ok = j <= shift + i;
    if (ok && mask != nullptr) {
      ok = mask[bi * a.mask.strides[0] + i * a.mask.strides[1] + j * a.mask.strides[2]] != 0;
    }
    float p = 0.f, ds = 0.f;
    if (ok) {
      const float* qr = t.q + r * kPitch;
      const float* gr = t.dy + r * kPitch;
      const float* kr = t.k + c * kPitch;
      const float* vr = t.v + c * kPitch;
      float s = 0.f, dp = 0.f;
#pragma unroll 4
      for (int x = 0; x < hd; ++x) {
        s += qr[x] * kr[x];
        dp += gr[x] * vr[x];
      }
      p = expf(a.scale * s - l);
      ds = p * (dp - t.d[r]);
    }
    if (kWantP) t.p[r * kSPitch + c] = p;
    t.ds[r * kSPitch + c] = ds;
  }
}

__global__ void __launch_bounds__(kBwdThreads)
    AttnRowStatsKernel(CuTensor dy, CuTensor out, CuTensor lse, float* row_lse, float* row_d) {
  const int64_t nh = dy.shape[1], sq = dy.shape[2], hd = dy.shape[3];
  const int64_t rows = dy.shape[0] * nh * sq;
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kStatsRowsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;  // the whole warp
  const int64_t i = row % sq, h = (row / sq) % nh, bi = row / (sq * nh);
  const float l = static_cast<const float*>(
      lse.data)[bi * lse.strides[0] + h * lse.strides[1] + i * lse.strides[2]];
  float part = 0.f;
  if (l != -INFINITY) {
    const int64_t gb = bi * dy.strides[0] + h * dy.strides[1] + i * dy.strides[2];
    const int64_t ob = bi * out.strides[0] + h * out.strides[1] + i * out.strides[2];
    for (int64_t x = lane; x < hd; x += 32) {
      part += LoadF(dy.data, gb + x * dy.strides[3], dy.dtype) *
              LoadF(out.data, ob + x * out.strides[3], out.dtype);
    }
  }
  const float dsum = WarpSum(part);
  if (lane == 0) {
    row_lse[row] = l;
    row_d[row] = l == -INFINITY ? 0.f : dsum;
  }
}

template <int kBr, int kBc, int kD>
__global__ void __launch_bounds__(kBwdThreads)
    AttnDkDvKernel(AttentionBackwardArgs a, const float* row_lse, const float* row_d) {
  using T = Tiles<kBr, kBc, kD>;
  constexpr int kPer = kBc * kD / kBwdThreads;  // dk (and dv) elements per thread
  static_assert(kBc * kD % kBwdThreads == 0, "the dk/dv tile must split evenly");
  extern __shared__ float smem[];
  const T t(smem);
  const int64_t nh = a.q.shape[1], sq = a.q.shape[2], hd = a.q.shape[3];
  const int64_t nkv = a.k.shape[1], skv = a.k.shape[2];
  const int64_t g = nh / nkv, shift = skv - sq;
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * kBc, kvh = blockIdx.y, bi = blockIdx.z;
  LoadRows<kBc, kD>(t.k, a.k, bi, kvh, j0, skv, hd);
  LoadRows<kBc, kD>(t.v, a.v, bi, kvh, j0, skv, hd);
  float dk[kPer], dv[kPer];
#pragma unroll
  for (int u = 0; u < kPer; ++u) dk[u] = dv[u] = 0.f;
  // Causal: query i sees key j0 only when shift + i >= j0; earlier rows see none of the tile.
  int64_t i_first = a.causal ? j0 - shift : 0;
  if (i_first < 0) i_first = 0;
  for (int64_t hg = 0; hg < g; ++hg) {
    const int64_t h = kvh * g + hg;
    for (int64_t i0 = i_first; i0 < sq; i0 += kBr) {
      __syncthreads();  // the previous step's readers of q, dy, p, ds are done
      LoadRows<kBr, kD>(t.q, a.q, bi, h, i0, sq, hd);
      LoadRows<kBr, kD>(t.dy, a.dy, bi, h, i0, sq, hd);
      LoadRowStats<kBr>(t.lse, t.d, row_lse, row_d, (bi * nh + h) * sq + i0, i0, sq);
      __syncthreads();
      ScoreTile<kBr, kBc, kD, true>(a, t, bi, i0, j0);
      __syncthreads();
#pragma unroll
      for (int u = 0; u < kPer; ++u) {
        const int e = threadIdx.x + u * kBwdThreads, c = e / kD, x = e % kD;
        if (x >= hd) continue;
        float sv = dv[u], sk = dk[u];
        for (int r = 0; r < kBr; ++r) {
          sv += t.p[r * T::kSPitch + c] * t.dy[r * T::kPitch + x];
          sk += t.ds[r * T::kSPitch + c] * t.q[r * T::kPitch + x];
        }
        dv[u] = sv;
        dk[u] = sk;
      }
    }
  }
  float* dkp = static_cast<float*>(a.dk.data);
  float* dvp = static_cast<float*>(a.dv.data);
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    const int e = threadIdx.x + u * kBwdThreads, c = e / kD, x = e % kD;
    const int64_t j = j0 + c;
    if (j >= skv || x >= hd) continue;
    dkp[bi * a.dk.strides[0] + kvh * a.dk.strides[1] + j * a.dk.strides[2] + x * a.dk.strides[3]] +=
        a.scale * dk[u];
    dvp[bi * a.dv.strides[0] + kvh * a.dv.strides[1] + j * a.dv.strides[2] + x * a.dv.strides[3]] +=
        dv[u];
  }
}

template <int kBr, int kBc, int kD>
__global__ void __launch_bounds__(kBwdThreads)
    AttnDqKernel(AttentionBackwardArgs a, const float* row_lse, const float* row_d) {
  using T = Tiles<kBr, kBc, kD>;
  constexpr int kPer = kBr * kD / kBwdThreads;  // dq elements per thread
  static_assert(kBr * kD % kBwdThreads == 0, "the dq tile must split evenly");
  extern __shared__ float smem[];
  const T t(smem);
  const int64_t nh = a.q.shape[1], sq = a.q.shape[2], hd = a.q.shape[3];
  const int64_t nkv = a.k.shape[1], skv = a.k.shape[2];
  const int64_t g = nh / nkv, shift = skv - sq;
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kBr, h = blockIdx.y, bi = blockIdx.z;
  const int64_t kvh = h / g;
  LoadRows<kBr, kD>(t.q, a.q, bi, h, i0, sq, hd);
  LoadRows<kBr, kD>(t.dy, a.dy, bi, h, i0, sq, hd);
  LoadRowStats<kBr>(t.lse, t.d, row_lse, row_d, (bi * nh + h) * sq + i0, i0, sq);
  float acc[kPer];
#pragma unroll
  for (int u = 0; u < kPer; ++u) acc[u] = 0.f;
  // Causal: the tile's last row sees keys up to shift + i_last; no row sees more.
  const int64_t i_last = (i0 + kBr < sq ? i0 + kBr : sq) - 1;
  int64_t j_stop = skv;
  if (a.causal && shift + i_last + 1 < j_stop) j_stop = shift + i_last + 1;
  for (int64_t j0 = 0; j0 < j_stop; j0 += kBc) {
    __syncthreads();  // q, dy and the stats are loaded; the previous step's k, ds readers done
    LoadRows<kBc, kD>(t.k, a.k, bi, kvh, j0, skv, hd);
    LoadRows<kBc, kD>(t.v, a.v, bi, kvh, j0, skv, hd);
    __syncthreads();
    ScoreTile<kBr, kBc, kD, false>(a, t, bi, i0, j0);
    __syncthreads();
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const int e = threadIdx.x + u * kBwdThreads, r = e / kD, x = e % kD;
      if (x >= hd) continue;
      float s = acc[u];
      for (int c = 0; c < kBc; ++c) s += t.ds[r * T::kSPitch + c] * t.k[c * T::kPitch + x];
      acc[u] = s;
    }
  }
  float* dqp = static_cast<float*>(a.dq.data);
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    const int e = threadIdx.x + u * kBwdThreads, r = e / kD, x = e % kD;
    const int64_t i = i0 + r;
    if (i >= sq || x >= hd) continue;
    dqp[bi * a.dq.strides[0] + h * a.dq.strides[1] + i * a.dq.strides[2] + x * a.dq.strides[3]] +=
        a.scale * acc[u];
  }
}

// The training forward: out and lse of query rows [i0, i0 + kBr) of head h, one block per
// (query tile, head, batch), with an online softmax over key tiles held in shared memory (the
// inference kernel of attention_kernels.cu reads K and V once per query row instead). Warp w
// owns rows w, w + 8, ...: lane c scores key c of the tile (kBc <= 32) and every lane keeps the
// rows' running max and sum (warp reductions) in registers. The unnormalised output sits in
// registers, kPer features per thread. Tiles: q [kBr][kD+1], k, v [kBc][kD+1], the
// probabilities in `p`, each row's rescale factor in column 0 of `ds`, and at the end the
// rows' max and sum in `lse` and `d`.
template <int kBr, int kBc, int kD>
__global__ void __launch_bounds__(kBwdThreads) AttnForwardLseKernel(AttentionArgs a) {
  using T = Tiles<kBr, kBc, kD>;
  constexpr int kPer = kBr * kD / kBwdThreads;  // output elements per thread
  static_assert(kBr * kD % kBwdThreads == 0, "the output tile must split evenly");
  static_assert(kBc <= 32, "a warp lane per key of the tile");
  constexpr int kWarps = kBwdThreads / 32;
  constexpr int kRowsPerWarp = (kBr + kWarps - 1) / kWarps;
  extern __shared__ float smem[];
  const T t(smem);
  const int64_t nh = a.q.shape[1], sq = a.q.shape[2], hd = a.q.shape[3];
  const int64_t nkv = a.k.shape[1], skv = a.k.shape[2];
  const int64_t g = nh / nkv, shift = skv - sq;
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kBr, h = blockIdx.y, bi = blockIdx.z;
  const int64_t kvh = h / g;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint8_t* mask = static_cast<const uint8_t*>(a.mask.data);
  LoadRows<kBr, kD>(t.q, a.q, bi, h, i0, sq, hd);
  float m_run[kRowsPerWarp], l_run[kRowsPerWarp];  // row warp + rr * kWarps
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    m_run[rr] = -INFINITY;
    l_run[rr] = 0.f;
  }
  float acc[kPer];
#pragma unroll
  for (int u = 0; u < kPer; ++u) acc[u] = 0.f;
  const int64_t i_last = (i0 + kBr < sq ? i0 + kBr : sq) - 1;
  int64_t j_stop = skv;
  if (a.causal && shift + i_last + 1 < j_stop) j_stop = shift + i_last + 1;
  for (int64_t j0 = 0; j0 < j_stop; j0 += kBc) {
    __syncthreads();  // q is loaded; the previous step's readers of k, v, p and ds are done
    LoadRows<kBc, kD>(t.k, a.k, bi, kvh, j0, skv, hd);
    LoadRows<kBc, kD>(t.v, a.v, bi, kvh, j0, skv, hd);
    __syncthreads();
    // One warp per row: scores, then the online-softmax update of the row's max and sum.
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int r = warp + rr * kWarps;
      if (r >= kBr) break;  // the same for the whole warp
      const int64_t i = i0 + r, j = j0 + lane;
      bool ok = lane < kBc && i < sq && j < skv;
      if (ok && a.causal) ok = j <= shift + i;
      if (ok && mask != nullptr) {
        ok = mask[bi * a.mask.strides[0] + i * a.mask.strides[1] + j * a.mask.strides[2]] != 0;
      }
      float s = -INFINITY;
      if (ok) {
        const float* qr = t.q + r * T::kPitch;
        const float* kr = t.k + lane * T::kPitch;
        float dot = 0.f;
#pragma unroll 4
        for (int x = 0; x < hd; ++x) dot += qr[x] * kr[x];
        s = a.scale * dot;
      }
      const float m_old = m_run[rr];
      const float m_new = fmaxf(m_old, WarpMax(s));
      float p = 0.f, corr = 1.f;
      if (m_new != -INFINITY) {  // the same for the whole warp
        p = ok ? expf(s - m_new) : 0.f;
        corr = expf(m_old - m_new);  // 0 while m_old is still -inf
      }
      m_run[rr] = m_new;
      l_run[rr] = l_run[rr] * corr + WarpSum(p);
      if (lane < kBc) t.p[r * T::kSPitch + lane] = p;
      if (lane == 0) t.ds[r * T::kSPitch] = corr;
    }
    __syncthreads();
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const int e = threadIdx.x + u * kBwdThreads, r = e / kD, x = e % kD;
      if (x >= hd) continue;
      float o = acc[u] * t.ds[r * T::kSPitch];
      for (int c = 0; c < kBc; ++c) o += t.p[r * T::kSPitch + c] * t.v[c * T::kPitch + x];
      acc[u] = o;
    }
  }
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int r = warp + rr * kWarps;
    if (r < kBr && lane == 0) {
      t.lse[r] = m_run[rr];
      t.d[r] = l_run[rr];
    }
  }
  __syncthreads();  // the rows' max and sum are visible
  const CuTensor& o = a.out;
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    const int e = threadIdx.x + u * kBwdThreads, r = e / kD, x = e % kD;
    const int64_t i = i0 + r;
    if (i >= sq || x >= hd) continue;
    const float l = t.d[r];
    const float inv = l > 0.f ? 1.f / l : 0.f;  // nothing attended: zeros
    StoreF(o.data, bi * o.strides[0] + h * o.strides[1] + i * o.strides[2] + x * o.strides[3],
           o.dtype, acc[u] * inv);
  }
  if (a.lse.data != nullptr) {
    const CuTensor& ls = a.lse;
    for (int r = threadIdx.x; r < kBr; r += blockDim.x) {
      const int64_t i = i0 + r;
      if (i >= sq) continue;
      const float l = t.d[r];
      static_cast<float*>(ls.data)[bi * ls.strides[0] + h * ls.strides[1] + i * ls.strides[2]] =
          l > 0.f ? t.lse[r] + logf(l) : -INFINITY;
    }
  }
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

template <int kBr, int kBc, int kD>
cudaError_t RunBackward(const AttentionBackwardArgs& a, const float* row_lse, const float* row_d,
                        cudaStream_t stream) {
  const size_t smem = Tiles<kBr, kBc, kD>::kFloats * sizeof(float);
  const int64_t b = a.q.shape[0], nh = a.q.shape[1], sq = a.q.shape[2];
  const int64_t nkv = a.k.shape[1], skv = a.k.shape[2];
  const dim3 kv_grid(static_cast<unsigned>(CeilDiv(skv, kBc)), static_cast<unsigned>(nkv),
                     static_cast<unsigned>(b));
  AttnDkDvKernel<kBr, kBc, kD><<<kv_grid, kBwdThreads, smem, stream>>>(a, row_lse, row_d);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  const dim3 q_grid(static_cast<unsigned>(CeilDiv(sq, kBr)), static_cast<unsigned>(nh),
                    static_cast<unsigned>(b));
  AttnDqKernel<kBr, kBc, kD><<<q_grid, kBwdThreads, smem, stream>>>(a, row_lse, row_d);
  return cudaGetLastError();
}

template <int kBr, int kBc, int kD>
cudaError_t RunForwardLse(const AttentionArgs& a, cudaStream_t stream) {
  const size_t smem = Tiles<kBr, kBc, kD>::kFloats * sizeof(float);
  const dim3 grid(static_cast<unsigned>(CeilDiv(a.q.shape[2], kBr)),
                  static_cast<unsigned>(a.q.shape[1]), static_cast<unsigned>(a.q.shape[0]));
  AttnForwardLseKernel<kBr, kBc, kD><<<grid, kBwdThreads, smem, stream>>>(a);
  return cudaGetLastError();
}

int64_t BackwardRows(const AttentionBackwardArgs& a) {
  return a.q.shape[0] * a.q.shape[1] * a.q.shape[2];
}

}  // namespace

cudaError_t LaunchAttentionForwardLse(const AttentionArgs& a, cudaStream_t stream) {
  const int64_t rows = a.q.shape[0] * a.q.shape[1] * a.q.shape[2], hd = a.q.shape[3];
  if (rows == 0 || hd == 0) return cudaSuccess;
  if (hd > kAttentionBackwardMaxHeadDim) return cudaErrorInvalidValue;
  if (hd <= 32) return RunForwardLse<32, 32, 32>(a, stream);
  if (hd <= 64) return RunForwardLse<32, 32, 64>(a, stream);
  if (hd <= 128) return RunForwardLse<16, 16, 128>(a, stream);
  return RunForwardLse<8, 8, 256>(a, stream);
}

size_t AttentionBackwardWorkspaceBytes(const AttentionBackwardArgs& a) {
  return 2 * static_cast<size_t>(BackwardRows(a)) * sizeof(float);
}

cudaError_t LaunchAttentionBackward(const AttentionBackwardArgs& a, void* workspace,
                                    cudaStream_t stream) {
  const int64_t rows = BackwardRows(a), hd = a.q.shape[3], skv = a.k.shape[2];
  if (rows == 0 || hd == 0 || skv == 0) return cudaSuccess;
  if (hd > kAttentionBackwardMaxHeadDim || workspace == nullptr) return cudaErrorInvalidValue;
  float* row_lse = static_cast<float*>(workspace);
  float* row_d = row_lse + rows;
  AttnRowStatsKernel<<<static_cast<unsigned>(CeilDiv(rows, kStatsRowsPerBlock)), kBwdThreads, 0,
                       stream>>>(a.dy, a.out, a.lse, row_lse, row_d);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  // Tiles as large as 48 KiB of shared memory allows for the head dim.
  if (hd <= 32) return RunBackward<32, 32, 32>(a, row_lse, row_d, stream);
  if (hd <= 64) return RunBackward<32, 32, 64>(a, row_lse, row_d, stream);
  if (hd <= 128) return RunBackward<16, 16, 128>(a, row_lse, row_d, stream);
  return RunBackward<8, 8, 256>(a, row_lse, row_d, stream);
}

}  // namespace cuda
}  // namespace cctune
