// Stand-in for CUB's DeviceSegmentedRadixSort::SortKeysDescending in the CPU emulator.
#ifndef CCTUNE_KERNELS_CUDA_EMU_CUB_DEVICE_SEGMENTED_RADIX_SORT_CUH_
#define CCTUNE_KERNELS_CUDA_EMU_CUB_DEVICE_SEGMENTED_RADIX_SORT_CUH_

#include <algorithm>
#include <functional>

#include "cuda_runtime_api.h"

namespace cub {

struct DeviceSegmentedRadixSort {
  template <typename K, typename Begin, typename End>
  static cudaError_t SortKeysDescending(void* temp, size_t& temp_bytes, const K* in, K* out, int,
                                        int segments, Begin begin, End end, int = 0,
                                        int = sizeof(K) * 8, cudaStream_t = nullptr) {
    if (temp == nullptr) {
      temp_bytes = 128;
      return cudaSuccess;
    }
    for (int s = 0; s < segments; ++s) {
      std::copy(in + begin[s], in + end[s], out + begin[s]);
      std::stable_sort(out + begin[s], out + end[s], std::greater<K>());
    }
    return cudaSuccess;
  }
};

}  // namespace cub

#endif  // CCTUNE_KERNELS_CUDA_EMU_CUB_DEVICE_SEGMENTED_RADIX_SORT_CUH_
