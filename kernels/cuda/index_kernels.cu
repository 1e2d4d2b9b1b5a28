// Indexing and selection: Embedding gather, Argmax, TopK (CUB radix sort on packed keys).
#include <climits>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>

#include "kernels/cuda/device_helpers.cuh"
#include "kernels/cuda/kernels.h"

namespace cctune {
namespace cuda {
namespace {

__global__ void EmbeddingKernel(CuTensor out, CuTensor table, CuTensor ids, int64_t n) {
  const int64_t d = out.shape[out.ndim - 1];
  const int64_t v = table.shape[0];
  const int64_t os = out.strides[out.ndim - 1];
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < n;
       idx += step) {
    const int64_t r = idx / d, j = idx - r * d;
    const long long id = LoadI(ids.data, OffsetOf(ids, ids.ndim, r), ids.dtype);
    const int64_t oo = RowOffset(out, r) + j * os;
    if (id < 0 || id >= v) {  // ops.cc validates ids; never read out of bounds regardless
      StoreF(out.data, oo, out.dtype, 0.f);
      continue;
    }
    const float val = LoadF(table.data, id * table.strides[0] + j * table.strides[1], table.dtype);
    StoreF(out.data, oo, out.dtype, val);
  }
}

// Keeps (v, i) when it comes before (bv, bi) in the CPU backend's order: NaN first, then
// larger values, then lower indices. (-inf, LLONG_MAX) is the empty start.
__device__ __forceinline__ void KeepBest(float v, long long i, float* bv, long long* bi) {
  const bool na = isnan(v), nb = isnan(*bv);
  const bool before = na != nb ? na : (!na && v != *bv ? v > *bv : i < *bi);
  if (before) {
    *bv = v;
    *bi = i;
  }
}

__global__ void ArgmaxKernel(CuTensor out, CuTensor x, int64_t rows, int64_t v) {
  __shared__ float sv[32];
  __shared__ long long si[32];
  const int64_t xs = x.strides[x.ndim - 1];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t xo = RowOffset(x, r);
    float bv = -INFINITY;
    long long bi = LLONG_MAX;
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
      KeepBest(LoadF(x.data, xo + j * xs, x.dtype), j, &bv, &bi);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const long long oi = __shfl_xor_sync(0xffffffffu, bi, o);
      KeepBest(ov, oi, &bv, &bi);
    }
    __syncthreads();
    if (lane == 0) {
      sv[warp] = bv;
      si[warp] = bi;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < nwarps; ++w) KeepBest(sv[w], si[w], &bv, &bi);
      StoreI(out.data, OffsetOf(out, out.ndim, r), out.dtype, bi == LLONG_MAX ? 0 : bi);
    }
  }
}

// Sort keys: the float's order-preserving bits above (2^32 - 1 - index), so one descending
// sort gives the CPU backend's order: NaN first, values descending, and among equal values
// lower indices first.
__global__ void TopKKeysKernel(unsigned long long* keys, CuTensor x, int64_t rows, int64_t v) {
  const int64_t xs = x.strides[x.ndim - 1];
  const int64_t n = rows * v;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < n;
       idx += step) {
    const int64_t r = idx / v, j = idx - r * v;
    float f = LoadF(x.data, RowOffset(x, r) + j * xs, x.dtype);
    if (f == 0.f) f = 0.f;  // -0 ties with +0
    uint32_t u = __float_as_uint(f);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    if (isnan(f)) u = 0xffffffffu;  // above +inf (0xff800000)
    keys[idx] = (static_cast<unsigned long long>(u) << 32) |
                (0xffffffffull - static_cast<unsigned long long>(j));
  }
}

__global__ void SegmentOffsetsKernel(int* offsets, int64_t rows, int64_t v) {
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r <= rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    offsets[r] = static_cast<int>(r * v);
  }
}

__global__ void TopKGatherKernel(CuTensor values, CuTensor indices, CuTensor x,
                                 const unsigned long long* sorted, int64_t rows, int64_t v,
                                 int64_t k) {
  const int64_t xs = x.strides[x.ndim - 1];
  const int64_t vs = values.strides[values.ndim - 1];
  const int64_t is = indices.strides[indices.ndim - 1];
  const int64_t n = rows * k;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < n;
       idx += step) {
    const int64_t r = idx / k, c = idx - r * k;
    const long long j = static_cast<long long>(0xffffffffull - (sorted[r * v + c] & 0xffffffffull));
    // Copy the element itself (not its f32 key) so values keep x's exact bits.
    const float val = LoadF(x.data, RowOffset(x, r) + j * xs, x.dtype);
    StoreF(values.data, RowOffset(values, r) + c * vs, values.dtype, val);
    StoreI(indices.data, RowOffset(indices, r) + c * is, indices.dtype, j);
  }
}

constexpr size_t kAlign = 256;
size_t AlignUp(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// Workspace layout: keys_in [n] u64 | keys_out [n] u64 | offsets [rows + 1] int | cub temp.
struct TopKLayout {
  size_t keys_in = 0, keys_out = 0, offsets = 0, temp = 0, temp_bytes = 0, total = 0;
};

cudaError_t PlanTopK(int64_t rows, int64_t v, TopKLayout* l) {
  const int64_t n = rows * v;
  if (n <= 0 || n > INT_MAX || v > INT_MAX) return cudaErrorInvalidValue;
  l->keys_in = 0;
  l->keys_out = AlignUp(static_cast<size_t>(n) * 8);
  l->offsets = l->keys_out + AlignUp(static_cast<size_t>(n) * 8);
  l->temp = l->offsets + AlignUp(static_cast<size_t>(rows + 1) * sizeof(int));
  size_t temp = 0;
  cudaError_t e;
  if (rows == 1) {
    e = cub::DeviceRadixSort::SortKeysDescending(
        nullptr, temp, static_cast<const unsigned long long*>(nullptr),
        static_cast<unsigned long long*>(nullptr), static_cast<int>(n));
  } else {
    e = cub::DeviceSegmentedRadixSort::SortKeysDescending(
        nullptr, temp, static_cast<const unsigned long long*>(nullptr),
        static_cast<unsigned long long*>(nullptr), static_cast<int>(n), static_cast<int>(rows),
        static_cast<const int*>(nullptr), static_cast<const int*>(nullptr));
  }
  if (e != cudaSuccess) return e;
  l->temp_bytes = temp;
  l->total = l->temp + AlignUp(temp);
  return cudaSuccess;
}

}  // namespace

cudaError_t LaunchEmbedding(const CuTensor& out, const CuTensor& table, const CuTensor& ids,
                            cudaStream_t stream) {
  const int64_t n = out.numel();
  if (n == 0) return cudaSuccess;
  EmbeddingKernel<<<GridFor(n), kThreads, 0, stream>>>(out, table, ids, n);
  return cudaGetLastError();
}

cudaError_t LaunchArgmax(const CuTensor& out, const CuTensor& x, cudaStream_t stream) {
  const int64_t v = x.shape[x.ndim - 1];
  const int64_t rows = v == 0 ? 0 : x.numel() / v;
  if (rows == 0) return cudaSuccess;
  const int threads = v >= 4096 ? 1024 : (v >= 512 ? 256 : 64);
  const unsigned grid = static_cast<unsigned>(rows < (1 << 20) ? rows : (1 << 20));
  ArgmaxKernel<<<grid, threads, 0, stream>>>(out, x, rows, v);
  return cudaGetLastError();
}

cudaError_t TopKWorkspaceBytes(int64_t rows, int64_t v, size_t* bytes) {
  TopKLayout l;
  const cudaError_t e = PlanTopK(rows, v, &l);
  *bytes = l.total;
  return e;
}

cudaError_t LaunchTopK(const CuTensor& values, const CuTensor& indices, const CuTensor& x,
                       int64_t k, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  const int64_t v = x.shape[x.ndim - 1];
  const int64_t rows = v == 0 ? 0 : x.numel() / v;
  if (rows == 0 || k == 0) return cudaSuccess;
  TopKLayout l;
  cudaError_t e = PlanTopK(rows, v, &l);
  if (e != cudaSuccess) return e;
  if (workspace_bytes < l.total) return cudaErrorInvalidValue;
  char* ws = static_cast<char*>(workspace);
  auto* keys_in = reinterpret_cast<unsigned long long*>(ws + l.keys_in);
  auto* keys_out = reinterpret_cast<unsigned long long*>(ws + l.keys_out);
  int* offsets = reinterpret_cast<int*>(ws + l.offsets);
  const int64_t n = rows * v;
  TopKKeysKernel<<<GridFor(n), kThreads, 0, stream>>>(keys_in, x, rows, v);
  if ((e = cudaGetLastError()) != cudaSuccess) return e;
  size_t temp = l.temp_bytes;
  if (rows == 1) {
    e = cub::DeviceRadixSort::SortKeysDescending(ws + l.temp, temp, keys_in, keys_out,
                                                 static_cast<int>(n), 0, 64, stream);
  } else {
    SegmentOffsetsKernel<<<GridFor(rows + 1), kThreads, 0, stream>>>(offsets, rows, v);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    e = cub::DeviceSegmentedRadixSort::SortKeysDescending(
        ws + l.temp, temp, keys_in, keys_out, static_cast<int>(n), static_cast<int>(rows), offsets,
        offsets + 1, 0, 64, stream);
  }
  if (e != cudaSuccess) return e;
  TopKGatherKernel<<<GridFor(rows * k), kThreads, 0, stream>>>(values, indices, x, keys_out, rows,
                                                               v, k);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace cctune
