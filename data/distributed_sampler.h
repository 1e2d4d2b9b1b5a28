// torch.utils.data.DistributedSampler's split of an epoch's sample order across the ranks of
// a data-parallel run (drop_last=False): the order is padded to a multiple of the number of
// replicas by repeating its beginning, and rank r takes positions r, r + N, r + 2N, ... So
// the ranks' shards are disjoint (but for the padding), equally long, and the union of the
// ranks' batch k is the single-process batch k of a batch N times larger.
#ifndef CCTUNE_DATA_DISTRIBUTED_SAMPLER_H_
#define CCTUNE_DATA_DISTRIBUTED_SAMPLER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace cctune {

// Samples per rank of a dataset of `size` samples over `num_replicas` ranks: ceil(size / N).
int64_t DistributedSamplerNumSamples(int64_t size, int64_t num_replicas);

// The samples of `rank` (of `num_replicas`) from an epoch's `order`, as above.
std::vector<int64_t> DistributedSamplerIndices(const std::vector<int64_t>& order,
                                               int64_t num_replicas, int64_t rank);

// InvalidArgument, naming the values, unless 1 <= num_replicas, 0 <= rank < num_replicas and
// the dataset (`size` samples, named `source`) has at least one sample per rank.
absl::Status CheckDistributedSampler(int64_t size, int64_t num_replicas, int64_t rank,
                                     const char* source);

}  // namespace cctune

#endif  // CCTUNE_DATA_DISTRIBUTED_SAMPLER_H_
