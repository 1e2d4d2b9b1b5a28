// CPU dropout (ops::Dropout): the mask comes from core's Philox4x32 (core/random.h), word
// offset + i for element i, so it is the Generator's stream exactly and does not depend on the
// thread count. Arguments are validated by kernels/ops.cc; any strides, f32/bf16/f16 storage.
#ifndef CCTUNE_KERNELS_CPU_DROPOUT_H_
#define CCTUNE_KERNELS_CPU_DROPOUT_H_

#include <cstdint>

#include "absl/status/status.h"
#include "core/tensor.h"

namespace cctune {
namespace cpu {

// out[i] = (word(seed, offset + i) >> 8) < drop_below ? 0 : x[i] · scale (see backend.h).
absl::Status Dropout(Tensor& out, const Tensor& x, uint32_t drop_below, float scale,
                     uint64_t seed, uint64_t offset);

}  // namespace cpu
}  // namespace cctune

#endif  // CCTUNE_KERNELS_CPU_DROPOUT_H_
