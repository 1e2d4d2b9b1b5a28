// The CUDA OpBackend (kernels/backend.h): every op of kernels/ops.h on CUDA tensors.
// Registered for DeviceType::kCUDA at static-init time when this library is linked in
// (kernels/BUILD links it into //kernels:ops when the toolkit is present). Matrix products use
// cuBLAS (gemm.h); the rest are the kernels of kernels.h. Sampling copies the logits to the
// host and runs the CPU backend's sampler, so draws match the CPU exactly for one seed.
#ifndef CCTUNE_KERNELS_CUDA_CUDA_BACKEND_H_
#define CCTUNE_KERNELS_CUDA_CUDA_BACKEND_H_

#include "kernels/backend.h"

namespace cctune {
namespace cuda {

// The registered backend (also reachable as GetOpBackend(DeviceType::kCUDA)).
OpBackend* CudaOpBackend();

}  // namespace cuda
}  // namespace cctune

#endif  // CCTUNE_KERNELS_CUDA_CUDA_BACKEND_H_
