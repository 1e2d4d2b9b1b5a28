// A raw strided view (pointer, dtype, shape, strides in elements) that crosses the boundary
// between core and device backends without pulling in Tensor.
#ifndef CCTUNE_CORE_STRIDED_H_
#define CCTUNE_CORE_STRIDED_H_

#include <cstdint>

#include "core/dtype.h"

namespace cctune {

constexpr int kMaxDims = 8;

struct StridedView {
  void* data = nullptr;  // points at element [0, ..., 0]
  DType dtype = DType::kF32;
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};

  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[i];
    return n;
  }
};

// dst[i] = cast(src[i]) for every index; shapes must match. CPU implementation, used by
// core for CPU tensors. Parallel over the outer dimensions for large copies.
void StridedCopyCpu(const StridedView& dst, const StridedView& src);

}  // namespace cctune

#endif  // CCTUNE_CORE_STRIDED_H_
