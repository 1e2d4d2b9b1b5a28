// The CPU op backend: the OpBackend that kernels/backend.cc hands out for DeviceType::kCPU.
// It forwards each validated call to the kernels of this folder. Obtained through a function
// (created on first use) rather than static-init registration, so it is always available.
#ifndef CCTUNE_KERNELS_CPU_CPU_BACKEND_H_
#define CCTUNE_KERNELS_CPU_CPU_BACKEND_H_

#include "kernels/backend.h"

namespace cctune {
namespace cpu {

// The process-wide CPU backend (never null, never destroyed).
OpBackend* CpuOpBackend();

}  // namespace cpu
}  // namespace cctune

#endif  // CCTUNE_KERNELS_CPU_CPU_BACKEND_H_
