// CPU embedding lookup: out[..., d] = table[ids[...], :]. Arguments are validated by
// kernels/ops.cc; the ids are range-checked here, before anything is written.
#ifndef CCTUNE_KERNELS_CPU_EMBEDDING_H_
#define CCTUNE_KERNELS_CPU_EMBEDDING_H_

#include "absl/status/status.h"
#include "core/tensor.h"

namespace cctune {
namespace cpu {

// OutOfRange naming the first id outside [0, v) and where it is.
absl::Status Embedding(Tensor& out, const Tensor& table, const Tensor& ids);

// dtable[ids[i], :] += dy[i, :]. The indices are grouped by id (a stable sort), then the ids
// are processed in parallel, each summing its rows in index order: no two threads write one
// row and the result does not depend on the thread count. Ids are range-checked first.
absl::Status EmbeddingBackward(Tensor& dtable, const Tensor& dy, const Tensor& ids);

}  // namespace cpu
}  // namespace cctune

#endif  // CCTUNE_KERNELS_CPU_EMBEDDING_H_
