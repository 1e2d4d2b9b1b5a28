// Batches of a Dataset in a seeded order, with a position (epoch, batch index) that can be
// saved with a checkpoint and restored, so that a resumed run sees exactly the batches the
// uninterrupted run would have. The order of epoch e is a pure function of (seed, e): a
// Fisher-Yates shuffle driven by core/random.h's Philox generator with key `seed` and the
// counter range starting at e * 2^40 (one independent stream per epoch). As in torchtune's
// recipes, the last incomplete batch is dropped unless drop_last is false. With num_replicas
// N > 1 the loader reads rank `rank`'s shard of that order, as torch's DistributedSampler
// (every rank shuffles alike, then takes every N-th sample).
//
//   CCTUNE_ASSIGN_OR_RETURN(DataLoader loader, DataLoader::Create(dataset, options));
//   loader.SetPosition(saved);                       // or start at (0, 0)
//   for (; loader.position().epoch < epochs; loader.StartEpoch(loader.position().epoch + 1)) {
//     while (!loader.EpochDone()) {
//       CCTUNE_ASSIGN_OR_RETURN(Batch batch, loader.Next());
//       ...
//     }
//   }
#ifndef CCTUNE_DATA_DATA_LOADER_H_
#define CCTUNE_DATA_DATA_LOADER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/collate.h"
#include "data/dataset.h"

namespace cctune {

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = true;
  CollateOptions collate;
  // Data parallel: this loader is rank `rank` of `num_replicas` and reads its shard of every
  // epoch's order (data/distributed_sampler.h); batch_size is per rank.
  int64_t num_replicas = 1;
  int64_t rank = 0;
};

struct DataLoaderPosition {
  int64_t epoch = 0;
  int64_t batch_index = 0;  // the next batch Next() returns
  bool operator==(const DataLoaderPosition& o) const {
    return epoch == o.epoch && batch_index == o.batch_index;
  }
};

class DataLoader {
 public:
  // InvalidArgument for batch_size < 1, a dataset with no full batch under drop_last, or
  // (data parallel) a rank outside [0, num_replicas) or fewer samples than ranks.
  static absl::StatusOr<DataLoader> Create(std::shared_ptr<const Dataset> dataset,
                                           const DataLoaderOptions& options);

  const Dataset& dataset() const { return *dataset_; }
  const DataLoaderOptions& options() const { return options_; }
  int64_t batches_per_epoch() const { return batches_per_epoch_; }

  DataLoaderPosition position() const { return position_; }
  // batch_index may equal batches_per_epoch() (the epoch is done). Errors name the values.
  absl::Status SetPosition(const DataLoaderPosition& position);
  // Moves to batch 0 of `epoch`.
  absl::Status StartEpoch(int64_t epoch) { return SetPosition({epoch, 0}); }
  bool EpochDone() const { return position_.batch_index >= batches_per_epoch_; }

  // The batch at position(), then advances by one. OutOfRange when EpochDone().
  absl::StatusOr<Batch> Next();

  // The dataset indices in batch `batch_index` of `epoch` (what Next() collates).
  std::vector<int64_t> BatchIndices(int64_t epoch, int64_t batch_index) const;
  // The sample order of `epoch`: a permutation of [0, size) (identity without shuffle), the
  // same on every rank.
  std::vector<int64_t> EpochOrder(int64_t epoch) const;
  // This rank's samples of `epoch`, in order (EpochOrder with one replica).
  std::vector<int64_t> RankOrder(int64_t epoch) const;

 private:
  DataLoader(std::shared_ptr<const Dataset> dataset, const DataLoaderOptions& options);
  const std::vector<int64_t>& OrderFor(int64_t epoch) const;

  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  int64_t batches_per_epoch_ = 0;
  DataLoaderPosition position_;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> cached_order_;
};

}  // namespace cctune

#endif  // CCTUNE_DATA_DATA_LOADER_H_
