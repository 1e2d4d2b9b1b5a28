#include "data/distributed_sampler.h"

#include "absl/strings/str_cat.h"

namespace cctune {

int64_t DistributedSamplerNumSamples(int64_t size, int64_t num_replicas) {
  return num_replicas <= 1 ? size : (size + num_replicas - 1) / num_replicas;
}

std::vector<int64_t> DistributedSamplerIndices(const std::vector<int64_t>& order,
                                               int64_t num_replicas, int64_t rank) {
  if (num_replicas <= 1) return order;
  const int64_t n = static_cast<int64_t>(order.size());
  const int64_t per_rank = DistributedSamplerNumSamples(n, num_replicas);
  std::vector<int64_t> out;
  if (n == 0) return out;
  out.reserve(per_rank);
  // Position p of the padded order is order[p mod n] (torch repeats the start as often as
  // needed).
  for (int64_t k = 0; k < per_rank; ++k) out.push_back(order[(k * num_replicas + rank) % n]);
  return out;
}

absl::Status CheckDistributedSampler(int64_t size, int64_t num_replicas, int64_t rank,
                                     const char* source) {
  if (num_replicas < 1 || rank < 0 || rank >= num_replicas) {
    return absl::InvalidArgumentError(absl::StrCat("distributed sampler: rank ", rank,
                                                   " is not one of ", num_replicas, " ranks"));
  }
  if (size < num_replicas) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dataset '", source, "' has ", size, " samples, fewer than the ", num_replicas,
        " ranks of the run: every rank needs at least one"));
  }
  return absl::OkStatus();
}

}  // namespace cctune
