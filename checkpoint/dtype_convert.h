// Fast contiguous dtype conversion for checkpoint loading (bf16/f16 -> f32 and back at memory
// bandwidth, OpenMP over chunks). Semantics match core's element conversions: floating values
// convert through f32 with round-to-nearest-even, integers through int64, bool is 0/1.
#ifndef CCTUNE_CHECKPOINT_DTYPE_CONVERT_H_
#define CCTUNE_CHECKPOINT_DTYPE_CONVERT_H_

#include <cstdint>

#include "core/dtype.h"

namespace cctune {

// dst[i] = cast(src[i]) for i in [0, n). Both buffers are contiguous, aligned for their dtype
// and do not overlap.
void ConvertElements(void* dst, DType dst_type, const void* src, DType src_type, int64_t n);

}  // namespace cctune

#endif  // CCTUNE_CHECKPOINT_DTYPE_CONVERT_H_
