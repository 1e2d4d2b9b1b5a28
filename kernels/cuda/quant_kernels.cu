// Weight-only int8 / int4 GEMM (see quant_kernels.h).
#include "kernels/cuda/device_helpers.cuh"
#include "kernels/cuda/quant_kernels.h"

namespace cctune {
namespace cuda {
namespace {

constexpr int kWarps = 4;  // output rows per block
constexpr int kMr = 4;     // rows of x per pass

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// One warp per output row j; lanes split the row's 32-bit words.
__global__ void QuantGemmKernel(int64_t m, const float* a, int64_t lda, CuQuantMatrix w,
                                float* c, int64_t ldc) {
  const int lane = threadIdx.x & 31;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (j >= w.n) return;
  const bool int8 = !w.int4;
  const int64_t words = w.row_bytes / 4;
  const uint32_t* row = reinterpret_cast<const uint32_t*>(w.data + j * w.row_bytes);
  const int64_t groups = w.groups;
  for (int64_t i0 = 0; i0 < m; i0 += kMr) {
    const int rows = static_cast<int>(m - i0 < kMr ? m - i0 : kMr);
    float acc[kMr] = {0.f, 0.f, 0.f, 0.f};
    for (int64_t wi = lane; wi < words; wi += 32) {
      const uint32_t word = row[wi];
      if (int8) {
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          const int64_t t = wi * 4 + b;
          if (t >= w.k) break;
          const float q = static_cast<float>(static_cast<int8_t>((word >> (8 * b)) & 0xffu));
          for (int r = 0; r < rows; ++r) acc[r] += q * a[(i0 + r) * lda + t];
        }
      } else {
        // Word wi holds bytes 4·(wi % 4) .. +3 of block wi / 4: inputs t (low nibble) and
        // t + 16 (high nibble) of the block.
        const int64_t base = (wi / 4) * 32;
        const int t0 = static_cast<int>(wi % 4) * 4;
        const int64_t g = base / w.groupsize;
        const float s = Bf16BitsToFloat(w.scales4[j * groups + g]);
        const float z = Bf16BitsToFloat(w.zeros4[j * groups + g]);
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          const uint32_t byte = (word >> (8 * b)) & 0xffu;
          const int64_t lo = base + t0 + b, hi = lo + 16;
          const float wlo = static_cast<float>(static_cast<int>(byte & 15u) - 8) * s + z;
          const float whi = static_cast<float>(static_cast<int>(byte >> 4) - 8) * s + z;
          for (int r = 0; r < rows; ++r) {
            const float* ar = a + (i0 + r) * lda;
            if (lo < w.k) acc[r] += wlo * ar[lo];
            if (hi < w.k) acc[r] += whi * ar[hi];
          }
        }
      }
    }
    for (int r = 0; r < rows; ++r) {
      const float v = WarpSum(acc[r]);
      if (lane == 0) c[(i0 + r) * ldc + j] = int8 ? v * w.scales[j] : v;
    }
  }
}

}  // namespace

cudaError_t LaunchQuantGemmNT(int64_t m, const float* a, int64_t lda, const CuQuantMatrix& w,
                              float* c, int64_t ldc, cudaStream_t stream) {
  if (m <= 0 || w.n <= 0) return cudaSuccess;
  const int64_t blocks = (w.n + kWarps - 1) / kWarps;
  QuantGemmKernel<<<static_cast<unsigned>(blocks), 32 * kWarps, 0, stream>>>(m, a, lda, w, c, ldc);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace cctune
