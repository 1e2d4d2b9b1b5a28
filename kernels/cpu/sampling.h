// CPU selection and sampling kernels: Argmax, TopK, Sample. Arguments are validated by
// kernels/ops.cc.
//
// Order used everywhere here: larger value first, NaN above every number (as torch.argmax and
// torch.topk treat it), equal values by lower index first.
//
// Sample, per row of logits [b, v] (row r uses the r-th of b Uniform() draws, all taken from
// `gen` in row order before any work starts; none when temperature == 0):
//   1. temperature == 0: the argmax (first index among equal maxima). Nothing else applies.
//   2. z = logits / temperature (f32).
//   3. top_k > 0 (clamped to v): keep the top_k ids in the order above (so among equal logits
//      at the cut, the lower ids are kept).
//   4. p_i = exp(z_i - max z) over the kept ids, normalised over them (sums in f64).
//   5. top_p < 1: in the order above applied to p, keep the shortest prefix whose mass reaches
//      top_p (sum >= top_p; at least one id).
//   6. Renormalise over what is kept and draw: with u the row's Uniform(), pick the first kept
//      id, in increasing id order, at which the running sum of kept p exceeds u * (sum of kept
//      p). A row with a NaN logit, or with no finite one, is an InvalidArgument error.
#ifndef CCTUNE_KERNELS_CPU_SAMPLING_H_
#define CCTUNE_KERNELS_CPU_SAMPLING_H_

#include <cstdint>

#include "absl/status/status.h"
#include "core/random.h"
#include "core/tensor.h"
#include "kernels/op_types.h"

namespace cctune {
namespace cpu {

absl::Status Argmax(Tensor& out, const Tensor& x);
absl::Status TopK(Tensor& values, Tensor& indices, const Tensor& x, int64_t k);
absl::Status Sample(Tensor& out, const Tensor& logits, const ops::SamplingParams& params,
                    Generator& gen);

}  // namespace cpu
}  // namespace cctune

#endif  // CCTUNE_KERNELS_CPU_SAMPLING_H_
