// CUDA runtime and cuBLAS errors as absl::Status. Every runtime / cuBLAS call of the cuda
// backend goes through these macros, so a failure names the call and the library's error
// string: "cudaMalloc(&ptr, rounded): out of memory (cudaErrorMemoryAllocation)".
#ifndef CCTUNE_KERNELS_CUDA_CUDA_STATUS_H_
#define CCTUNE_KERNELS_CUDA_CUDA_STATUS_H_

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"

namespace cctune {
namespace cuda {

// The Status for a failed runtime call `what` (OK for cudaSuccess). Clears the runtime's
// last-error slot so a recoverable failure (e.g. out of memory) is not reported again by the
// next kernel launch check.
absl::Status CudaErrorStatus(cudaError_t error, const char* what);
absl::Status CublasErrorStatus(cublasStatus_t status, const char* what);

}  // namespace cuda
}  // namespace cctune

#define CCTUNE_CUDA_RETURN_IF_ERROR(expr)                                \
  do {                                                                   \
    const cudaError_t cctune_cuda_error_ = (expr);                       \
    if (cctune_cuda_error_ != cudaSuccess) {                             \
      return ::cctune::cuda::CudaErrorStatus(cctune_cuda_error_, #expr); \
    }                                                                    \
  } while (0)

#define CCTUNE_CUBLAS_RETURN_IF_ERROR(expr)                                   \
  do {                                                                        \
    const cublasStatus_t cctune_cublas_status_ = (expr);                      \
    if (cctune_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                     \
      return ::cctune::cuda::CublasErrorStatus(cctune_cublas_status_, #expr); \
    }                                                                         \
  } while (0)

#endif  // CCTUNE_KERNELS_CUDA_CUDA_STATUS_H_
