// Stand-in for CUB's DeviceRadixSort::SortKeysDescending in the CPU emulator (a stable sort).
#ifndef CCTUNE_KERNELS_CUDA_EMU_CUB_DEVICE_RADIX_SORT_CUH_
#define CCTUNE_KERNELS_CUDA_EMU_CUB_DEVICE_RADIX_SORT_CUH_

#include <algorithm>
#include <functional>

#include "cuda_runtime_api.h"

namespace cub {

struct DeviceRadixSort {
  template <typename K>
  static cudaError_t SortKeysDescending(void* temp, size_t& temp_bytes, const K* in, K* out, int n,
                                        int = 0, int = sizeof(K) * 8, cudaStream_t = nullptr) {
    if (temp == nullptr) {
      temp_bytes = 64;
      return cudaSuccess;
    }
    std::copy(in, in + n, out);
    std::stable_sort(out, out + n, std::greater<K>());
    return cudaSuccess;
  }
};

}  // namespace cub

#endif  // CCTUNE_KERNELS_CUDA_EMU_CUB_DEVICE_RADIX_SORT_CUH_
