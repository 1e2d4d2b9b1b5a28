#include "data/data_loader.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/random.h"
#include "core/status.h"
#include "data/distributed_sampler.h"

namespace cctune {

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, const DataLoaderOptions& options)
    : dataset_(std::move(dataset)), options_(options) {
  const int64_t n = DistributedSamplerNumSamples(dataset_->size(), options_.num_replicas);
  const int64_t b = options_.batch_size;
  batches_per_epoch_ = options_.drop_last ? n / b : (n + b - 1) / b;
}

absl::StatusOr<DataLoader> DataLoader::Create(std::shared_ptr<const Dataset> dataset,
                                              const DataLoaderOptions& options) {
  if (dataset == nullptr) return absl::InvalidArgumentError("DataLoader: no dataset");
  if (options.batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("DataLoader: batch_size (", options.batch_size, ") must be >= 1"));
  }
  if (options.num_replicas != 1 || options.rank != 0) {
    CCTUNE_RETURN_IF_ERROR(CheckDistributedSampler(dataset->size(), options.num_replicas,
                                                   options.rank, dataset->source().c_str()));
  }
  DataLoader loader(std::move(dataset), options);
  if (loader.batches_per_epoch_ == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("DataLoader: dataset '", loader.dataset_->source(), "' has ",
                     loader.dataset_->size(), " samples, fewer than batch_size (",
                     options.batch_size, ")", options.drop_last ? " with drop_last" : "",
                     options.num_replicas > 1
                         ? absl::StrCat(" per rank (", loader.dataset_->size(), " samples over ",
                                        options.num_replicas, " ranks)")
                         : ""));
  }
  return loader;
}

absl::Status DataLoader::SetPosition(const DataLoaderPosition& p) {
  if (p.epoch < 0 || p.batch_index < 0 || p.batch_index > batches_per_epoch_) {
    return absl::OutOfRangeError(absl::StrCat("DataLoader: position (epoch ", p.epoch, ", batch ",
                                              p.batch_index, ") is outside the dataset's ",
                                              batches_per_epoch_, " batches per epoch"));
  }
  position_ = p;
  return absl::OkStatus();
}

std::vector<int64_t> DataLoader::EpochOrder(int64_t epoch) const {
  const int64_t n = dataset_->size();
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  if (!options_.shuffle) return order;
  Generator gen;
  gen.SetState(options_.seed, static_cast<uint64_t>(epoch) << 40);
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(gen.UniformInt(static_cast<uint64_t>(i) + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

std::vector<int64_t> DataLoader::RankOrder(int64_t epoch) const {
  return DistributedSamplerIndices(EpochOrder(epoch), options_.num_replicas, options_.rank);
}

const std::vector<int64_t>& DataLoader::OrderFor(int64_t epoch) const {
  if (cached_epoch_ != epoch) {
    cached_order_ = RankOrder(epoch);
    cached_epoch_ = epoch;
  }
  return cached_order_;
}

std::vector<int64_t> DataLoader::BatchIndices(int64_t epoch, int64_t batch_index) const {
  const std::vector<int64_t>& order = OrderFor(epoch);
  const int64_t begin = batch_index * options_.batch_size;
  const int64_t end = std::min<int64_t>(begin + options_.batch_size, order.size());
  if (begin >= end) return {};
  return std::vector<int64_t>(order.begin() + begin, order.begin() + end);
}

absl::StatusOr<Batch> DataLoader::Next() {
  if (EpochDone()) {
    return absl::OutOfRangeError(absl::StrCat("DataLoader: epoch ", position_.epoch, " is done (",
                                              batches_per_epoch_, " batches)"));
  }
  const std::vector<int64_t> indices = BatchIndices(position_.epoch, position_.batch_index);
  std::vector<const Sample*> samples;
  samples.reserve(indices.size());
  for (int64_t i : indices) samples.push_back(&(*dataset_)[i]);
  CCTUNE_ASSIGN_OR_RETURN(Batch batch, Collate(samples, options_.collate));
  ++position_.batch_index;
  return batch;
}

}  // namespace cctune
