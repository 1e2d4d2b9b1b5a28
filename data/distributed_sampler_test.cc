#include "data/distributed_sampler.h"

#include <algorithm>
#include <numeric>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;

std::vector<int64_t> Order(int64_t n) {
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::reverse(order.begin(), order.end());  // not the identity: positions, not values
  return order;
}

TEST(DistributedSamplerTest, OneReplicaIsTheOrder) {
  EXPECT_EQ(DistributedSamplerIndices(Order(7), 1, 0), Order(7));
  EXPECT_EQ(DistributedSamplerNumSamples(7, 1), 7);
}

// torch.utils.data.DistributedSampler(drop_last=False) for every size and world size: padded
// by repeating the start, rank r takes positions r, r + N, ...
TEST(DistributedSamplerTest, MatchesTorchForEveryWorldSize) {
  for (int64_t n = 1; n <= 13; ++n) {
    for (int64_t world = 1; world <= 5; ++world) {
      const std::vector<int64_t> order = Order(n);
      std::vector<int64_t> padded = order;
      const int64_t total = (n + world - 1) / world * world;
      while (static_cast<int64_t>(padded.size()) < total) {
        padded.push_back(order[padded.size() % n]);
      }
      std::multiset<int64_t> all;
      for (int64_t r = 0; r < world; ++r) {
        std::vector<int64_t> want;
        for (int64_t p = r; p < total; p += world) want.push_back(padded[p]);
        const std::vector<int64_t> got = DistributedSamplerIndices(order, world, r);
        EXPECT_EQ(got, want) << "n " << n << " world " << world << " rank " << r;
        EXPECT_EQ(static_cast<int64_t>(got.size()), DistributedSamplerNumSamples(n, world));
        all.insert(got.begin(), got.end());
      }
      // Disjoint but for the padding: every sample at least once, total samples in all.
      EXPECT_EQ(static_cast<int64_t>(all.size()), total);
      for (int64_t i = 0; i < n; ++i) EXPECT_GE(all.count(i), 1u);
    }
  }
}

// The ranks' batch k together are the single-process batch k of a batch N times larger.
TEST(DistributedSamplerTest, RanksBatchesMakeTheGlobalBatch) {
  const std::vector<int64_t> order = Order(24);
  for (int64_t world = 1; world <= 4; ++world) {
    const int64_t b = 2;
    for (int64_t k = 0; k < 24 / (world * b); ++k) {
      std::set<int64_t> ranks, global(order.begin() + k * world * b,
                                      order.begin() + (k + 1) * world * b);
      for (int64_t r = 0; r < world; ++r) {
        const std::vector<int64_t> mine = DistributedSamplerIndices(order, world, r);
        ranks.insert(mine.begin() + k * b, mine.begin() + (k + 1) * b);
      }
      EXPECT_EQ(ranks, global) << "world " << world << " batch " << k;
    }
  }
}

TEST(DistributedSamplerTest, ChecksNameTheValues) {
  EXPECT_TRUE(CheckDistributedSampler(4, 4, 3, "d").ok());
  EXPECT_THAT(CheckDistributedSampler(3, 4, 0, "tiny").message(),
              HasSubstr("dataset 'tiny' has 3 samples, fewer than the 4 ranks"));
  EXPECT_THAT(CheckDistributedSampler(8, 2, 2, "d").message(), HasSubstr("rank 2 is not one of 2"));
}

}  // namespace
}  // namespace cctune
