// CUDA kernels of weight-only quantization: y[m, n] = x[m, k] · dequant(W)ᵀ for the int8
// (per-channel) and int4 (grouped, with zero points) formats of kernels/cpu/quant/quant.h, with
// the same bytes (CuQuantMatrix: kernels/cpu/quant's QuantMatrix with device pointers). One warp per output row;
// each lane unpacks 4 bytes at a time and accumulates in f32; the rows of x are taken 4 at a
// time. Plain C++ and CUDA runtime types only (shared by nvcc and the host compiler), as
// kernels/cuda/kernels.h.
#ifndef CCTUNE_KERNELS_CUDA_QUANT_KERNELS_H_
#define CCTUNE_KERNELS_CUDA_QUANT_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace cctune {
namespace cuda {

// A quantized weight [n, k] on the device, laid out as kernels/cpu/quant/quant.h documents.
struct CuQuantMatrix {
  bool int4 = false;              // false: int8 per channel
  int64_t n = 0, k = 0;
  int64_t groupsize = 0;          // int4
  int64_t row_bytes = 0;          // Int8RowBytes(k) / Int4RowBytes(k)
  int64_t groups = 0;             // int4: Int4Groups(k, groupsize)
  const uint8_t* data = nullptr;  // [n, row_bytes]
  const float* scales = nullptr;  // int8: [n]
  const uint16_t* scales4 = nullptr;  // int4: bf16 bits [n, groups]
  const uint16_t* zeros4 = nullptr;   // int4: bf16 bits [n, groups]
};

// c[i * ldc + j] = Σ_t a[i * lda + t] · dequant(w)[j, t]; a, c and w's arrays on the device.
// Enqueues on `stream` and returns the launch error (no synchronisation).
cudaError_t LaunchQuantGemmNT(int64_t m, const float* a, int64_t lda, const CuQuantMatrix& w,
                              float* c, int64_t ldc, cudaStream_t stream);

}  // namespace cuda
}  // namespace cctune

#endif  // CCTUNE_KERNELS_CUDA_QUANT_KERNELS_H_
