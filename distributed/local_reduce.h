// The arithmetic of the MPI backend's reductions, done locally and in a fixed order: a rank
// that owns a chunk receives every rank's copy of it and combines them in rank order
// 0, 1, ..., N-1. Floating-point sums and averages accumulate in double and round once to the
// tensor's dtype (f32, bf16, f16), so the result does not depend on MPI's choice of algorithm
// and two runs are bit-identical. Integer sums wrap like unsigned arithmetic; max propagates
// NaN. Integer averages are not defined (InvalidArgument, checked by ValidateReduce).
#ifndef CCTUNE_DISTRIBUTED_LOCAL_REDUCE_H_
#define CCTUNE_DISTRIBUTED_LOCAL_REDUCE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "core/dtype.h"
#include "distributed/process_group.h"

namespace cctune {

// OK when `op` is defined for `dtype` (f32/bf16/f16: sum, avg, max; i32/i64: sum, max);
// InvalidArgument naming the collective, the op and the dtype otherwise.
absl::Status ValidateReduce(const char* collective, DType dtype, ReduceOp op);

// out[i] = op over r in [0, nblocks) of block r's element i, for i in [0, count). Block r
// starts `block_stride` elements after block r-1 in `blocks`. `out` may be any block.
void ReduceBlocks(const void* blocks, int nblocks, int64_t block_stride, int64_t count,
                  DType dtype, ReduceOp op, void* out);

}  // namespace cctune

#endif  // CCTUNE_DISTRIBUTED_LOCAL_REDUCE_H_
