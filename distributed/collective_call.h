// What a rank says about the collective it is entering, as both backends exchange it to name
// the ranks not heard from and to catch ranks that call different collectives: 32 bytes, the
// same layout on every rank (the MPI backend's arrival handshake, the NCCL backend's host
// record). Also the message pieces both backends share.
#ifndef CCTUNE_DISTRIBUTED_COLLECTIVE_CALL_H_
#define CCTUNE_DISTRIBUTED_COLLECTIVE_CALL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/tensor.h"

namespace cctune {

enum class CollectiveKind : int32_t {
  kAllReduce = 1,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kBarrier
};

// "all_reduce", "reduce_scatter", "all_gather", "broadcast", "barrier".
const char* CollectiveName(int32_t kind);

struct CollectiveCall {
  int64_t seq = 0;    // 1, 2, ... per group
  int64_t numel = 0;  // elements per rank: the all-gather's input, the reduce-scatter's output
  int32_t kind = 0;   // CollectiveKind
  int32_t dtype = 0;  // DType
  int32_t arg = 0;    // the ReduceOp, or the broadcast's root
  int32_t rank = 0;   // who sends it (not compared)
};
static_assert(sizeof(CollectiveCall) == 32, "the record is 32 bytes on every rank");

// "all_reduce #3 (sum of 1000 f32 elements)", "all_gather #4 (8 bf16 elements per rank)",
// "broadcast #5 (10 i64 elements from rank 1)", "barrier #6".
std::string DescribeCall(const CollectiveCall& call);

// The same collective (everything but the sender).
bool SameCall(const CollectiveCall& a, const CollectiveCall& b);

// "rank 1" / "ranks 1, 3 (2 of 8)", at most 16 named.
std::string RankList(const std::vector<int>& ranks, int world_size);

// OK when `big` holds world_size * small.numel() elements of small's dtype; InvalidArgument
// naming `op`, both counts and dtypes otherwise.
absl::Status CheckChunkSizes(const std::string& op, const Tensor& small, const Tensor& big,
                             int world_size);

}  // namespace cctune

#endif  // CCTUNE_DISTRIBUTED_COLLECTIVE_CALL_H_
