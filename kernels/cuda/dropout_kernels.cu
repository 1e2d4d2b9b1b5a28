// Dropout (ops::Dropout): the mask is Philox4x32-10 word offset + i for element i, computed
// here with exactly core/random.cc's Philox4x32 (same constants, rounds and word order), so
// the CUDA mask equals the CPU's and the Generator's stream bit for bit.
#include "kernels/cuda/device_helpers.cuh"
#include "kernels/cuda/kernels.h"

namespace cctune {
namespace cuda {
namespace {

// core/random.cc Philox4x32: counter c, key k, 10 rounds; the 32x32 -> 64-bit products split
// into their high and low words.
__device__ __forceinline__ void Philox4x32(uint32_t c[4], uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    const uint32_t n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
    c[0] = n0;
    c[1] = lo1;
    c[2] = n2;
    c[3] = lo0;
    k0 += kW0;
    k1 += kW1;
  }
}

// One thread per Philox block: block g covers words 4·(first_block + g) .. +3, i.e. elements
// i = 4·g + lane - lead with lead = offset % 4; those in [0, n) are written. Each element is
// read and written by exactly one thread, so out may alias x exactly.
__global__ void DropoutKernel(CuTensor out, CuTensor x, int64_t n, int64_t groups,
                              uint64_t first_block, int lead, uint32_t drop_below, float scale,
                              uint32_t k0, uint32_t k1) {
  const bool dense = out.ndim == 1 && out.strides[0] == 1 && x.strides[0] == 1;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups;
       g += step) {
    const uint64_t block = first_block + static_cast<uint64_t>(g);
    uint32_t c[4] = {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0u, 0u};
    Philox4x32(c, k0, k1);
#pragma unroll
    for (int lane = 0; lane < 4; ++lane) {
      const int64_t i = 4 * g + lane - lead;
      if (i < 0 || i >= n) continue;
      int64_t oo = i, ox = i;
      if (!dense) {
        oo = OffsetOf(out, out.ndim, i);
        ox = OffsetOf(x, x.ndim, i);
      }
      const float v = LoadF(x.data, ox, x.dtype);
      StoreF(out.data, oo, out.dtype, (c[lane] >> 8) < drop_below ? 0.f : v * scale);
    }
  }
}

}  // namespace

cudaError_t LaunchDropout(const CuTensor& out_in, const CuTensor& x_in, uint32_t drop_below,
                          float scale, uint64_t seed, uint64_t offset, cudaStream_t stream) {
  const int64_t n = out_in.numel();
  if (n == 0) return cudaSuccess;
  if (!IsFloatingCodeHost(out_in.dtype) || !IsFloatingCodeHost(x_in.dtype)) {
    return cudaErrorInvalidValue;
  }
  CuTensor ops[2] = {out_in, x_in};
  CollapseDims(ops, 2);  // keeps the row-major element order, so i is unchanged
  const int lead = static_cast<int>(offset % 4);
  const int64_t groups = (lead + n + 3) / 4;
  DropoutKernel<<<GridFor(groups), kThreads, 0, stream>>>(
      ops[0], ops[1], n, groups, offset / 4, lead, drop_below, scale,
      static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace cctune
