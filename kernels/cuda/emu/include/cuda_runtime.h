// Stand-in for <cuda_runtime.h> in the CPU emulator: the runtime API plus the device-side
// builtins of emu.h.
#ifndef CCTUNE_KERNELS_CUDA_EMU_CUDA_RUNTIME_H_
#define CCTUNE_KERNELS_CUDA_EMU_CUDA_RUNTIME_H_

#include "cuda_runtime_api.h"
#include "emu.h"

#endif  // CCTUNE_KERNELS_CUDA_EMU_CUDA_RUNTIME_H_
