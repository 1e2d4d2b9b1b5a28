#include "distributed/collective_call.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "distributed/process_group.h"

namespace cctune {

const char* CollectiveName(int32_t kind) {
  switch (static_cast<CollectiveKind>(kind)) {
    case CollectiveKind::kAllReduce:
      return "all_reduce";
    case CollectiveKind::kReduceScatter:
      return "reduce_scatter";
    case CollectiveKind::kAllGather:
      return "all_gather";
    case CollectiveKind::kBroadcast:
      return "broadcast";
    case CollectiveKind::kBarrier:
      return "barrier";
  }
  return "an unknown collective";
}

std::string DescribeCall(const CollectiveCall& c) {
  const std::string s = absl::StrCat(CollectiveName(c.kind), " #", c.seq);
  const char* dtype = DTypeName(static_cast<DType>(c.dtype));
  switch (static_cast<CollectiveKind>(c.kind)) {
    case CollectiveKind::kAllReduce:
      return absl::StrCat(s, " (", ReduceOpName(static_cast<ReduceOp>(c.arg)), " of ", c.numel,
                          " ", dtype, " elements)");
    case CollectiveKind::kReduceScatter:
      return absl::StrCat(s, " (", ReduceOpName(static_cast<ReduceOp>(c.arg)), ", ", c.numel,
                          " ", dtype, " elements per rank)");
    case CollectiveKind::kAllGather:
      return absl::StrCat(s, " (", c.numel, " ", dtype, " elements per rank)");
    case CollectiveKind::kBroadcast:
      return absl::StrCat(s, " (", c.numel, " ", dtype, " elements from rank ", c.arg, ")");
    case CollectiveKind::kBarrier:
      return s;
  }
  return s;
}

bool SameCall(const CollectiveCall& a, const CollectiveCall& b) {
  return a.seq == b.seq && a.numel == b.numel && a.kind == b.kind && a.dtype == b.dtype &&
         a.arg == b.arg;
}

std::string RankList(const std::vector<int>& ranks, int world_size) {
  if (ranks.size() == 1) return absl::StrCat("rank ", ranks[0]);
  std::vector<int> shown(ranks.begin(), ranks.begin() + std::min<size_t>(ranks.size(), 16));
  return absl::StrCat("ranks ", absl::StrJoin(shown, ", "), ranks.size() > 16 ? ", ..." : "",
                      " (", ranks.size(), " of ", world_size, ")");
}

absl::Status CheckChunkSizes(const std::string& op, const Tensor& small, const Tensor& big,
                             int world_size) {
  if (small.dtype() == big.dtype() && big.numel() == small.numel() * world_size) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": the per-rank tensor has ", small.numel(), " ", DTypeName(small.dtype()),
      " elements and the full one ", big.numel(), " ", DTypeName(big.dtype()), " (world size ",
      world_size, ": it needs ", small.numel() * world_size, " ", DTypeName(small.dtype()), ")"));
}

}  // namespace cctune
