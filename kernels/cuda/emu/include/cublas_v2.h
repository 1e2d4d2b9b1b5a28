// Stand-in for <cublas_v2.h> in the CPU emulator.
#ifndef CCTUNE_KERNELS_CUDA_EMU_CUBLAS_V2_H_
#define CCTUNE_KERNELS_CUDA_EMU_CUBLAS_V2_H_

#include "cublas_api.h"

#endif  // CCTUNE_KERNELS_CUDA_EMU_CUBLAS_V2_H_
