// Backward (training) kernels of the elementwise, row-wise, RoPE and embedding ops, and the
// deterministic broadcast reduction they share (bias, norm-weight and broadcast gradients).
// No float atomics anywhere: every sum runs in an order fixed by the shapes, so a gradient
// has the same bits on every run.
#include "kernels/cuda/device_helpers.cuh"
#include "kernels/cuda/kernels.h"

namespace cctune {
namespace cuda {
namespace {

// ---- Deterministic sum over broadcast dims ----

// The dims of a reduction split into kept ones (one output each) and reduced ones (summed).
struct ReduceDims {
  void* out = nullptr;
  const void* in = nullptr;
  int in_dtype = kDtF32;
  int nk = 0, nr = 0;
  int64_t kept = 1, per = 1;  // number of outputs; inputs summed into each
  int64_t ksize[kCuMaxDims] = {}, kin[kCuMaxDims] = {}, kout[kCuMaxDims] = {};
  int64_t rsize[kCuMaxDims] = {}, rin[kCuMaxDims] = {};
};

// Offsets in `in` and `out` of output o (row-major over the kept dims).
__device__ __forceinline__ void KeptOffsets(const ReduceDims& r, int64_t o, int64_t* in_off,
                                            int64_t* out_off) {
  int64_t a = 0, b = 0;
  for (int d = r.nk - 1; d >= 0; --d) {
    const int64_t q = o / r.ksize[d];
    const int64_t i = o - q * r.ksize[d];
    a += i * r.kin[d];
    b += i * r.kout[d];
    o = q;
  }
  *in_off = a;
  *out_off = b;
}

// Offset in `in` of reduced index q (row-major over the reduced dims).
__device__ __forceinline__ int64_t ReducedOffset(const ReduceDims& r, int64_t q) {
  int64_t a = 0;
  for (int d = r.nr - 1; d >= 0; --d) {
    const int64_t t = q / r.rsize[d];
    a += (q - t * r.rsize[d]) * r.rin[d];
    q = t;
  }
  return a;
}

constexpr int kColX = 32, kColY = 16;

// Many outputs: a block of 32 x 16 threads serves 32 consecutive outputs; thread (x, y)
// (threadIdx.x = y * 32 + x) sums output x's reduced indices y, y + 16, ... in order, then
// thread (x, 0) adds the 16 partials in order.
__global__ void SumReduceColumnsKernel(ReduceDims r) {
  __shared__ float part[kColY][kColX + 1];
  const int tx = threadIdx.x % kColX, ty = threadIdx.x / kColX;
  for (int64_t o0 = static_cast<int64_t>(blockIdx.x) * kColX; o0 < r.kept;
       o0 += static_cast<int64_t>(gridDim.x) * kColX) {
    const int64_t o = o0 + tx;
    int64_t in_off = 0, out_off = 0;
    float acc = 0.f;
    if (o < r.kept) {
      KeptOffsets(r, o, &in_off, &out_off);
      for (int64_t q = ty; q < r.per; q += kColY) {
        acc += LoadF(r.in, in_off + ReducedOffset(r, q), r.in_dtype);
      }
    }
    part[ty][tx] = acc;
    __syncthreads();
    if (ty == 0 && o < r.kept) {
      float s = 0.f;
      for (int y = 0; y < kColY; ++y) s += part[y][tx];
      static_cast<float*>(r.out)[out_off] += s;
    }
    __syncthreads();  // `part` is rewritten by the next chunk
  }
}

// Few outputs: one block per output; thread t sums t, t + blockDim, ... then a block tree.
__global__ void SumReduceRowsKernel(ReduceDims r) {
  __shared__ float scratch[32];
  for (int64_t o = blockIdx.x; o < r.kept; o += gridDim.x) {
    int64_t in_off, out_off;
    KeptOffsets(r, o, &in_off, &out_off);
    float acc = 0.f;
    for (int64_t q = threadIdx.x; q < r.per; q += blockDim.x) {
      acc += LoadF(r.in, in_off + ReducedOffset(r, q), r.in_dtype);
    }
    acc = BlockSum(acc, scratch);
    if (threadIdx.x == 0) static_cast<float*>(r.out)[out_off] += acc;
  }
}

// ---- Elementwise ----

// Offsets of linear index i in up to 5 tensors of one shape (that of t[0]).
template <int N>
__device__ __forceinline__ void Offsets(const CuTensor* t, int64_t i, int64_t* off) {
#pragma unroll
  for (int k = 0; k < N; ++k) off[k] = 0;
  const int nd = t[0].ndim;
  for (int d = nd - 1; d >= 0; --d) {
    const int64_t s = t[0].shape[d];
    const int64_t q = i / s;
    const int64_t c = i - q * s;
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] += c * t[k].strides[d];
    i = q;
  }
}

struct Ops3 {
  CuTensor t[3];  // out, x, y
};

__global__ void AccumulateKernel(Ops3 ops, bool has_y, int64_t n) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  float* out = static_cast<float*>(ops.t[0].data);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t off[3];
    Offsets<3>(ops.t, i, off);
    float v = LoadF(ops.t[1].data, off[1], ops.t[1].dtype);
    if (has_y) v *= LoadF(ops.t[2].data, off[2], ops.t[2].dtype);
    out[off[0]] += v;
  }
}

struct Ops5 {
  CuTensor t[5];  // dgate, dup, dy, gate, up
};

// sigmoid(g) through e = exp(-|g|) <= 1, finite for any g (as the CPU backend computes it).
__device__ __forceinline__ float Sigmoid(float g) {
  const float e = expf(-fabsf(g));
  return (g >= 0.f ? 1.0f : e) / (1.0f + e);
}

__global__ void SiluMulBackwardKernel(Ops5 ops, int64_t n) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  float* dgate = static_cast<float*>(ops.t[0].data);
  float* dup = static_cast<float*>(ops.t[1].data);
  const float* dy = static_cast<const float*>(ops.t[2].data);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t off[5];
    Offsets<5>(ops.t, i, off);
    const float y = dy[off[2]];
    const float g = LoadF(ops.t[3].data, off[3], ops.t[3].dtype);
    const float u = LoadF(ops.t[4].data, off[4], ops.t[4].dtype);
    const float s = Sigmoid(g);
    dgate[off[0]] += y * u * s * (1.0f + g * (1.0f - s));
    dup[off[1]] += y * g * s;
  }
}

// ---- Row-wise ----

__global__ void SoftmaxBackwardKernel(CuTensor dx, CuTensor dy, CuTensor y, int64_t rows,
                                      int64_t d) {
  __shared__ float scratch[32];
  const int64_t ys = y.strides[y.ndim - 1], gs = dy.strides[dy.ndim - 1];
  const int64_t ds = dx.strides[dx.ndim - 1];
  const float* g = static_cast<const float*>(dy.data);
  float* o = static_cast<float*>(dx.data);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t yo = RowOffset(y, r), go = RowOffset(dy, r), oo = RowOffset(dx, r);
    float dot = 0.f;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      dot += g[go + j * gs] * LoadF(y.data, yo + j * ys, y.dtype);
    }
    dot = BlockSum(dot, scratch);  // every read of this row's dy is done past this point
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      // The same thread reads dy[j] and writes dx[j], so dx == dy is safe.
      const float yv = LoadF(y.data, yo + j * ys, y.dtype);
      o[oo + j * ds] = yv * (g[go + j * gs] - dot);
    }
  }
}

// Rows are split into chunks of `rows_per_chunk`; block c handles chunk c's rows in order and,
// when `partial` is set, writes partial[c, :] = sum over its rows of dy * x̂ (the first row
// stores, later ones add; each column belongs to one thread).
__global__ void RmsNormBackwardKernel(CuTensor dx, CuTensor dy, CuTensor x, CuTensor w, float eps,
                                      int64_t rows, int64_t d, int64_t rows_per_chunk,
                                      int64_t chunks, float* partial) {
  __shared__ float scratch[32];
  const int64_t xs = x.strides[x.ndim - 1], gs = dy.strides[dy.ndim - 1];
  const int64_t ds = dx.strides[dx.ndim - 1], ws = w.strides[0];
  const float* g = static_cast<const float*>(dy.data);
  float* o = static_cast<float*>(dx.data);
  const float inv_d = 1.0f / static_cast<float>(d);
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const int64_t r0 = c * rows_per_chunk;
    const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t xo = RowOffset(x, r), go = RowOffset(dy, r), oo = RowOffset(dx, r);
      float ss = 0.f, dot = 0.f;
      for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
        const float xv = LoadF(x.data, xo + j * xs, x.dtype);
        ss += xv * xv;
        dot += g[go + j * gs] * LoadF(w.data, j * ws, w.dtype) * xv;
      }
      ss = BlockSum(ss, scratch);
      dot = BlockSum(dot, scratch);
      const float rstd = 1.0f / sqrtf(ss * inv_d + eps);
      const float cf = rstd * rstd * dot * inv_d;
      for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
        const float xv = LoadF(x.data, xo + j * xs, x.dtype);
        const float gv = g[go + j * gs];
        const float t = gv * LoadF(w.data, j * ws, w.dtype);
        o[oo + j * ds] += rstd * (t - xv * cf);
        if (partial != nullptr) {
          const float p = gv * RoundTo(xv * rstd, x.dtype);  // x̂ as the forward rounded it
          float* pp = partial + c * d + j;
          *pp = r == r0 ? p : *pp + p;
        }
      }
    }
  }
}

// The number of row chunks RmsNormBackward's dweight partial sums use: a function of the
// shape only, so the summation order (hence the bits) never depends on the device.
int64_t RmsNormChunks(int64_t rows) { return rows < 512 ? rows : 512; }

// ---- RoPE ----

// One thread per rotated pair (b, s, n, i): the rotation by -theta.
__global__ void RopeBackwardKernel(CuTensor dx, CuTensor dy, CuTensor cos_t, CuTensor sin_t,
                                   CuTensor pos, bool interleaved, int64_t n) {
  const int64_t S = dy.shape[1], H = dy.shape[2], half = dy.shape[3] / 2;
  const int64_t max_seq = cos_t.shape[0];
  const int64_t ps_b = pos.ndim == 2 ? pos.strides[0] : 0;
  const int64_t ps_s = pos.strides[pos.ndim - 1];
  const float* c = static_cast<const float*>(cos_t.data);
  const float* s = static_cast<const float*>(sin_t.data);
  const float* g = static_cast<const float*>(dy.data);
  float* o = static_cast<float*>(dx.data);
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
    const int64_t gb = bi * dy.strides[0] + si * dy.strides[1] + h * dy.strides[2];
    const int64_t ob = bi * dx.strides[0] + si * dx.strides[1] + h * dx.strides[2];
    const int64_t j0 = interleaved ? 2 * i : i;
    const int64_t j1 = interleaved ? 2 * i + 1 : i + half;
    const long long p = LoadI(pos.data, bi * ps_b + si * ps_s, pos.dtype);
    const float g0 = g[gb + j0 * dy.strides[3]];
    const float g1 = g[gb + j1 * dy.strides[3]];
    float y0, y1;
    if (p < 0 || p >= max_seq) {
      y0 = y1 = NAN;  // the host checks positions first; make a missed bad one visible
    } else {
      const float cv = c[p * cos_t.strides[0] + i * cos_t.strides[1]];
      const float sv = s[p * sin_t.strides[0] + i * sin_t.strides[1]];
      y0 = g0 * cv + g1 * sv;
      y1 = g1 * cv - g0 * sv;
    }
    // Both elements of the pair were read above by this thread, so dx == dy is safe.
    o[ob + j0 * dx.strides[3]] = y0;
    o[ob + j1 * dx.strides[3]] = y1;
  }
}

// ---- Embedding ----

// Block (g, cy) sums group g's rows of dy over columns cy * blockDim + tid, ... in index order
// and adds the sum to its table row: each table row is written by one group only.
__global__ void EmbeddingBackwardKernel(CuTensor dtable, CuTensor dy, const int64_t* order,
                                        const int64_t* starts, const int64_t* rows, int64_t groups,
                                        int64_t d) {
  const int64_t gs = dy.strides[dy.ndim - 1];
  const int64_t ts0 = dtable.strides[0], ts1 = dtable.strides[1];
  const float* g = static_cast<const float*>(dy.data);
  float* table = static_cast<float*>(dtable.data);
  for (int64_t u = blockIdx.x; u < groups; u += gridDim.x) {
    const int64_t i0 = starts[u], i1 = starts[u + 1];
    float* trow = table + rows[u] * ts0;
    for (int64_t j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x; j < d;
         j += static_cast<int64_t>(gridDim.y) * blockDim.x) {
      float acc = 0.f;
      for (int64_t i = i0; i < i1; ++i) acc += g[RowOffset(dy, order[i]) + j * gs];
      trow[j * ts1] += acc;
    }
  }
}

}  // namespace

cudaError_t LaunchSumReduce(const CuTensor& out, const CuTensor& in, cudaStream_t stream) {
  if (in.numel() == 0) return cudaSuccess;
  ReduceDims r;
  r.out = out.data;
  r.in = in.data;
  r.in_dtype = in.dtype;
  for (int d = 0; d < in.ndim; ++d) {
    if (in.shape[d] == 1) continue;
    if (out.strides[d] == 0) {
      r.rsize[r.nr] = in.shape[d];
      r.rin[r.nr] = in.strides[d];
      r.per *= in.shape[d];
      ++r.nr;
    } else {
      r.ksize[r.nk] = in.shape[d];
      r.kin[r.nk] = in.strides[d];
      r.kout[r.nk] = out.strides[d];
      r.kept *= in.shape[d];
      ++r.nk;
    }
  }
  if (r.per == 1) return LaunchAccumulate(out, in, CuTensor(), stream);  // nothing to sum
  // The kernel choice depends on the shapes only, so the summation order does too.
  if (r.kept >= 1024) {
    SumReduceColumnsKernel<<<GridFor(r.kept, kColX), kColX * kColY, 0, stream>>>(r);
  } else {
    SumReduceRowsKernel<<<static_cast<unsigned>(r.kept), RowThreads(r.per), 0, stream>>>(r);
  }
  return cudaGetLastError();
}

cudaError_t LaunchAccumulate(const CuTensor& out, const CuTensor& x, const CuTensor& y,
                             cudaStream_t stream) {
  const int64_t n = out.numel();
  if (n == 0) return cudaSuccess;
  const bool has_y = y.data != nullptr;
  Ops3 ops;
  ops.t[0] = out;
  ops.t[1] = x;
  ops.t[2] = has_y ? y : x;
  CollapseDims(ops.t, 3);
  AccumulateKernel<<<GridFor(n), kThreads, 0, stream>>>(ops, has_y, n);
  return cudaGetLastError();
}

cudaError_t LaunchSiluMulBackward(const CuTensor& dgate, const CuTensor& dup, const CuTensor& dy,
                                  const CuTensor& gate, const CuTensor& up, cudaStream_t stream) {
  const int64_t n = dy.numel();
  if (n == 0) return cudaSuccess;
  Ops5 ops;
  ops.t[0] = dgate;
  ops.t[1] = dup;
  ops.t[2] = dy;
  ops.t[3] = gate;
  ops.t[4] = up;
  SiluMulBackwardKernel<<<GridFor(n), kThreads, 0, stream>>>(ops, n);
  return cudaGetLastError();
}

cudaError_t LaunchSoftmaxBackward(const CuTensor& dx, const CuTensor& dy, const CuTensor& y,
                                  cudaStream_t stream) {
  const int64_t d = y.shape[y.ndim - 1];
  const int64_t rows = d == 0 ? 0 : y.numel() / d;
  if (rows == 0) return cudaSuccess;
  SoftmaxBackwardKernel<<<RowGrid(rows), RowThreads(d), 0, stream>>>(dx, dy, y, rows, d);
  return cudaGetLastError();
}

int64_t RmsNormBackwardScratchFloats(const CuTensor& x) {
  const int64_t d = x.ndim == 0 ? 1 : x.shape[x.ndim - 1];
  const int64_t rows = d == 0 ? 0 : x.numel() / d;
  return RmsNormChunks(rows) * d;
}

cudaError_t LaunchRmsNormBackward(const CuTensor& dx, const CuTensor& dweight, const CuTensor& dy,
                                  const CuTensor& x, const CuTensor& weight, float eps,
                                  float* scratch, cudaStream_t stream) {
  const int64_t d = x.shape[x.ndim - 1];
  const int64_t rows = d == 0 ? 0 : x.numel() / d;
  if (rows == 0) return cudaSuccess;
  const bool want_dw = dweight.data != nullptr;
  if (want_dw && scratch == nullptr) return cudaErrorInvalidValue;
  const int64_t chunks = want_dw ? RmsNormChunks(rows) : rows;
  const int64_t per_chunk = (rows + chunks - 1) / chunks;
  const int64_t used = (rows + per_chunk - 1) / per_chunk;  // chunks that hold a row
  RmsNormBackwardKernel<<<RowGrid(used), RowThreads(d), 0, stream>>>(
      dx, dy, x, weight, eps, rows, d, per_chunk, used, want_dw ? scratch : nullptr);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess || !want_dw) return err;
  // dweight [d] += sum over the `used` partial rows, in chunk order.
  CuTensor part;
  part.data = scratch;
  part.dtype = kDtF32;
  part.ndim = 2;
  part.shape[0] = used;
  part.shape[1] = d;
  part.strides[0] = d;
  part.strides[1] = 1;
  CuTensor out = part;
  out.data = dweight.data;
  out.strides[0] = 0;
  out.strides[1] = dweight.strides[0];
  return LaunchSumReduce(out, part, stream);
}

cudaError_t LaunchRopeBackward(const CuTensor& dx, const CuTensor& dy, const CuTensor& cos,
                               const CuTensor& sin, const CuTensor& positions, bool interleaved,
                               cudaStream_t stream) {
  const int64_t n = dy.numel() / 2;
  if (n == 0) return cudaSuccess;
  RopeBackwardKernel<<<GridFor(n), kThreads, 0, stream>>>(dx, dy, cos, sin, positions, interleaved,
                                                          n);
  return cudaGetLastError();
}

cudaError_t LaunchEmbeddingBackward(const CuTensor& dtable, const CuTensor& dy,
                                    const int64_t* order, const int64_t* starts,
                                    const int64_t* rows, int64_t groups, cudaStream_t stream) {
  const int64_t d = dtable.shape[1];
  if (groups == 0 || d == 0) return cudaSuccess;
  const int threads = d >= 256 ? 256 : d >= 128 ? 128 : 64;
  int64_t col_blocks = (d + threads - 1) / threads;
  if (col_blocks > 65535) col_blocks = 65535;
  const dim3 grid(RowGrid(groups), static_cast<unsigned>(col_blocks));
  EmbeddingBackwardKernel<<<grid, threads, 0, stream>>>(dtable, dy, order, starts, rows, groups, d);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace cctune
