#include "data/data_loader.h"

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/random.h"
#include "data/packed_dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;

// Sample i has length 1 + i % 5 and tokens 1000 * i + k: a batch's contents identify it.
std::shared_ptr<const Dataset> Numbered(int n) {
  std::vector<Sample> samples;
  for (int i = 0; i < n; ++i) {
    Sample s;
    for (int k = 0; k <= i % 5; ++k) {
      s.tokens.push_back(1000 * i + k);
      s.labels.push_back(1000 * i + k);
    }
    samples.push_back(std::move(s));
  }
  return std::make_shared<const Dataset>(std::move(samples), false, "numbered");
}

DataLoaderOptions Options(int64_t batch, bool shuffle, uint64_t seed, bool drop_last = true) {
  DataLoaderOptions o;
  o.batch_size = batch;
  o.shuffle = shuffle;
  o.seed = seed;
  o.drop_last = drop_last;
  return o;
}

TEST(DataLoaderTest, EachEpochIsAPermutationAndEpochsDiffer) {
  auto loader = DataLoader::Create(Numbered(23), Options(4, true, 7));
  ASSERT_TRUE(loader.ok()) << loader.status();
  std::vector<std::vector<int64_t>> orders;
  for (int64_t e = 0; e < 4; ++e) {
    std::vector<int64_t> order = loader->EpochOrder(e);
    std::vector<int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    for (int i = 0; i < 23; ++i) ASSERT_EQ(sorted[i], i);
    orders.push_back(order);
  }
  EXPECT_NE(orders[0], orders[1]);
  EXPECT_NE(orders[1], orders[2]);
  // Same seed: same orders; another seed: different.
  auto same = DataLoader::Create(Numbered(23), Options(4, true, 7));
  auto other = DataLoader::Create(Numbered(23), Options(4, true, 8));
  EXPECT_EQ(same->EpochOrder(2), orders[2]);
  EXPECT_NE(other->EpochOrder(2), orders[2]);
  // No shuffle: identity.
  auto plain = DataLoader::Create(Numbered(23), Options(4, false, 7));
  std::vector<int64_t> identity(23);
  for (int i = 0; i < 23; ++i) identity[i] = i;
  EXPECT_EQ(plain->EpochOrder(5), identity);
}

TEST(DataLoaderTest, ShuffleIsUnbiased) {
  // Over many epochs, each of 5 samples lands first about 1/5 of the time.
  auto loader = DataLoader::Create(Numbered(5), Options(1, true, 123));
  ASSERT_TRUE(loader.ok());
  std::vector<int> first(5, 0);
  const int epochs = 5000;
  for (int e = 0; e < epochs; ++e) ++first[loader->EpochOrder(e)[0]];
  for (int i = 0; i < 5; ++i) {
    EXPECT_NEAR(first[i], epochs / 5, epochs / 5 * 0.1) << i;
  }
}

TEST(DataLoaderTest, BatchesFollowTheOrderAndDropLast) {
  auto loader = DataLoader::Create(Numbered(10), Options(3, true, 1));
  ASSERT_TRUE(loader.ok());
  EXPECT_EQ(loader->batches_per_epoch(), 3);
  const std::vector<int64_t> order = loader->EpochOrder(0);
  std::set<int64_t> seen;
  for (int64_t b = 0; b < 3; ++b) {
    auto batch = loader->Next();
    ASSERT_TRUE(batch.ok()) << batch.status();
    ASSERT_EQ(batch->tokens.size(0), 3);
    const std::vector<int64_t> tok = *batch->tokens.ToInt64Vector();
    const int64_t s = batch->tokens.size(1);
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(tok[r * s] / 1000, order[b * 3 + r]);
      seen.insert(tok[r * s] / 1000);
    }
  }
  EXPECT_EQ(seen.size(), 9u);
  EXPECT_TRUE(loader->EpochDone());
  EXPECT_EQ(loader->Next().status().code(), absl::StatusCode::kOutOfRange);

  auto keep = DataLoader::Create(Numbered(10), Options(3, true, 1, /*drop_last=*/false));
  ASSERT_TRUE(keep.ok());
  EXPECT_EQ(keep->batches_per_epoch(), 4);
  ASSERT_TRUE(keep->SetPosition({0, 3}).ok());
  auto last = keep->Next();
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(last->tokens.size(0), 1);
}

// The sequence of batches of an interrupted run, restored from its saved position, equals an
// uninterrupted run's.
TEST(DataLoaderTest, RestoredPositionContinuesIdentically) {
  auto dataset = Numbered(37);
  const DataLoaderOptions o = Options(4, true, 99);
  const int epochs = 3;
  auto run = [&](DataLoader& loader, int max_batches, std::vector<std::vector<int64_t>>* out) {
    int taken = 0;
    while (loader.position().epoch < epochs) {
      while (!loader.EpochDone()) {
        if (taken == max_batches) return;
        auto batch = loader.Next();
        ASSERT_TRUE(batch.ok()) << batch.status();
        out->push_back(*batch->tokens.ToInt64Vector());
        ++taken;
      }
      ASSERT_TRUE(loader.StartEpoch(loader.position().epoch + 1).ok());
    }
  };
  std::vector<std::vector<int64_t>> whole, resumed;
  DataLoader a = *DataLoader::Create(dataset, o);
  run(a, -1, &whole);
  ASSERT_EQ(whole.size(), 27u);

  for (int stop : {1, 9, 10, 20}) {
    resumed.clear();
    DataLoader first = *DataLoader::Create(dataset, o);
    run(first, stop, &resumed);
    const DataLoaderPosition saved = first.position();
    DataLoader second = *DataLoader::Create(dataset, o);  // a fresh process
    ASSERT_TRUE(second.SetPosition(saved).ok());
    run(second, -1, &resumed);
    EXPECT_EQ(resumed, whole) << "stopped after " << stop;
  }
}

TEST(DataLoaderTest, PackedDatasetBatches) {
  std::vector<Sample> samples;
  Generator gen(4);
  for (int i = 0; i < 30; ++i) {
    Sample s;
    const int len = 1 + static_cast<int>(gen.UniformInt(7));
    for (int k = 0; k < len; ++k) {
      s.tokens.push_back(i);
      s.labels.push_back(i);
    }
    samples.push_back(std::move(s));
  }
  PackOptions po;
  po.max_seq_len = 8;
  auto packed =
      std::make_shared<const Dataset>(*PackDataset(Dataset(std::move(samples), false, "r"), po));
  auto loader = DataLoader::Create(packed, Options(2, true, 5));
  ASSERT_TRUE(loader.ok());
  auto batch = loader->Next();
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_TRUE(batch->packed);
  EXPECT_EQ(batch->tokens.shape(), (Shape{2, 8}));
  EXPECT_EQ(batch->input_pos.shape(), (Shape{2, 8}));
  EXPECT_EQ(batch->seq_lens.size(), 2u);
}

TEST(DataLoaderTest, BadArgumentsAndPositions) {
  EXPECT_THAT(std::string(DataLoader::Create(Numbered(3), Options(0, true, 1)).status().message()),
              HasSubstr("batch_size (0)"));
  EXPECT_THAT(std::string(DataLoader::Create(Numbered(3), Options(4, true, 1)).status().message()),
              HasSubstr("has 3 samples, fewer than batch_size (4) with drop_last"));
  auto loader = DataLoader::Create(Numbered(8), Options(4, true, 1));
  ASSERT_TRUE(loader.ok());
  EXPECT_TRUE(loader->SetPosition({5, 2}).ok());  // the end of epoch 5
  EXPECT_TRUE(loader->EpochDone());
  EXPECT_THAT(std::string(loader->SetPosition({0, 3}).message()),
              HasSubstr("(epoch 0, batch 3) is outside the dataset's 2 batches per epoch"));
  EXPECT_FALSE(loader->SetPosition({-1, 0}).ok());
}

}  // namespace
}  // namespace cctune

namespace cctune {
namespace {

// Data parallel: each rank's loader reads its DistributedSampler shard of the same shuffled
// order; batch_size is per rank, so batches per epoch are ceil(n / N) / b.
TEST(DataLoaderTest, RanksReadDisjointShardsOfTheSameOrder) {
  auto ds = Numbered(20);
  DataLoaderOptions o = Options(2, true, 5);
  auto whole_or = DataLoader::Create(ds, o);
  ASSERT_TRUE(whole_or.ok()) << whole_or.status();
  const DataLoader& whole = *whole_or;
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    const std::vector<int64_t> order = whole.EpochOrder(epoch);
    std::set<int64_t> seen;
    for (int64_t r = 0; r < 2; ++r) {
      DataLoaderOptions ro = o;
      ro.num_replicas = 2;
      ro.rank = r;
      auto loader_or = DataLoader::Create(ds, ro);
      ASSERT_TRUE(loader_or.ok()) << loader_or.status();
      const DataLoader& loader = *loader_or;
      EXPECT_EQ(loader.batches_per_epoch(), 5);
      for (int64_t k = 0; k < 5; ++k) {
        for (int64_t i : loader.BatchIndices(epoch, k)) EXPECT_TRUE(seen.insert(i).second);
        // Batch k of both ranks = batch k of a batch of 4 on one process.
        for (int64_t i : loader.BatchIndices(epoch, k)) {
          const auto pos = std::find(order.begin(), order.end(), i) - order.begin();
          EXPECT_EQ(pos / 4, k);
        }
      }
    }
    EXPECT_EQ(seen.size(), 20u);
  }
}

TEST(DataLoaderTest, FewerSamplesThanRanksIsAnError) {
  DataLoaderOptions o = Options(1, false, 0);
  o.num_replicas = 4;
  o.rank = 1;
  absl::StatusOr<DataLoader> loader = DataLoader::Create(Numbered(3), o);
  ASSERT_FALSE(loader.ok());
  EXPECT_THAT(loader.status().message(), HasSubstr("3 samples, fewer than the 4 ranks"));
}

}  // namespace
}  // namespace cctune
