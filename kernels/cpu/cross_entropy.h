// CPU cross-entropy over logits [n, v] with integer targets and an ignore_index (ops.h
// documents the contract). Arguments are validated by kernels/ops.cc; the targets are
// range-checked here before anything is written. Rows run in parallel, each in f32 with its
// own max and sum (FastExp), reading its logits in place when they are f32 with unit stride.
#ifndef CCTUNE_KERNELS_CPU_CROSS_ENTROPY_H_
#define CCTUNE_KERNELS_CPU_CROSS_ENTROPY_H_

#include <cstdint>

#include "absl/status/status.h"
#include "core/tensor.h"

namespace cctune {
namespace cpu {

absl::Status CrossEntropyForward(Tensor& loss_sum, Tensor& num_valid, Tensor* row_loss,
                                 const Tensor& logits, const Tensor& targets, int64_t ignore_index);
// dlogits may be logits itself (same f32 view): each element is read before it is written.
absl::Status CrossEntropyBackward(Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                                  float scale, int64_t ignore_index);

}  // namespace cpu
}  // namespace cctune

#endif  // CCTUNE_KERNELS_CPU_CROSS_ENTROPY_H_
