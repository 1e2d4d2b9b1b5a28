#include "data/packed_dataset.h"

#include <algorithm>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace cctune {
namespace {

// The pack being filled; like torchtune's dict of lists.
struct Buffer {
  std::vector<int32_t> tokens, labels, input_pos, seq_lens;
};

template <typename T>
std::vector<T> Head(const std::vector<T>& v, size_t n) {
  return std::vector<T>(v.begin(), v.begin() + std::min(n, v.size()));
}
template <typename T>
std::vector<T> Tail(const std::vector<T>& v, size_t n) {
  return std::vector<T>(v.begin() + std::min(n, v.size()), v.end());
}

class Packer {
 public:
  explicit Packer(const PackOptions& o) : o_(o) {}

  absl::StatusOr<std::vector<Sample>> Run(const Dataset& ds) {
    const size_t max = static_cast<size_t>(o_.max_seq_len);
    for (int64_t i = 0; i < ds.size(); ++i) {
      const Sample& s = ds[i];
      const size_t len = s.tokens.size();
      if (len == 0) continue;
      if (len > max && !o_.split_across_pack) {
        return absl::InvalidArgumentError(
            absl::StrCat("packing '", ds.source(), "': sample ", i, " has ", len,
                         " tokens, more than max_seq_len (", max,
                         "); set split_across_pack or increase max_seq_len"));
      }
      cur_.tokens.insert(cur_.tokens.end(), s.tokens.begin(), s.tokens.end());
      cur_.labels.insert(cur_.labels.end(), s.labels.begin(), s.labels.end());
      for (size_t x = 0; x < len; ++x) cur_.input_pos.push_back(static_cast<int32_t>(x % max));
      cur_.seq_lens.push_back(static_cast<int32_t>(len));
      while (cur_.tokens.size() > max && !ShouldStop()) SplitAndAdd();
      previous_boundary_ = cur_.tokens.size();
      if (ShouldStop()) break;
    }
    if (!cur_.tokens.empty() && !ShouldStop()) Add(std::move(cur_));
    return std::move(packs_);
  }

 private:
  bool ShouldStop() const {
    return o_.max_packs > 0 && static_cast<int64_t>(packs_.size()) >= o_.max_packs;
  }

  void SplitAndAdd() {
    const size_t max = static_cast<size_t>(o_.max_seq_len);
    size_t boundary;
    Buffer pack;
    pack.seq_lens = Head(cur_.seq_lens, cur_.seq_lens.size() - 1);
    if (o_.split_across_pack) {
      boundary = max;
      // The last document is cut so that the lengths sum to max_seq_len.
      const int64_t before = std::accumulate(pack.seq_lens.begin(), pack.seq_lens.end(), 0ll);
      const int64_t leftover = static_cast<int64_t>(max) - before;
      if (leftover > 0) pack.seq_lens.push_back(static_cast<int32_t>(leftover));
    } else {
      boundary = previous_boundary_;  // the last sample moves whole to the next pack
    }
    pack.tokens = Head(cur_.tokens, boundary);
    pack.labels = Head(cur_.labels, boundary);
    pack.input_pos = Head(cur_.input_pos, boundary);
    const int32_t next_len = o_.split_across_pack
                                 ? static_cast<int32_t>(cur_.tokens.size() - boundary)
                                 : cur_.seq_lens.back();
    Add(std::move(pack));
    Buffer next;
    next.tokens = Tail(cur_.tokens, boundary);
    next.labels = Tail(cur_.labels, boundary);
    next.input_pos = Tail(cur_.input_pos, boundary);
    next.seq_lens = {next_len};
    cur_ = std::move(next);
  }

  void Add(Buffer pack) {
    const size_t max = static_cast<size_t>(o_.max_seq_len);
    Sample s;
    const size_t pad = max - pack.tokens.size();
    s.num_padding = static_cast<int32_t>(pad);
    s.tokens = std::move(pack.tokens);
    s.labels = std::move(pack.labels);
    s.input_pos = std::move(pack.input_pos);
    s.seq_lens = std::move(pack.seq_lens);
    if (pad > 0) {
      const int32_t last = s.input_pos.empty() ? -1 : s.input_pos.back();
      s.tokens.resize(max, o_.pad_id);
      s.labels.resize(max, kIgnoreIndex);
      for (size_t k = 1; k <= pad; ++k) {
        s.input_pos.push_back(
            std::min<int32_t>(last + static_cast<int32_t>(k), static_cast<int32_t>(max) - 1));
      }
      s.seq_lens.push_back(static_cast<int32_t>(pad));
    }
    packs_.push_back(std::move(s));
  }

  const PackOptions o_;
  Buffer cur_;
  size_t previous_boundary_ = 0;
  std::vector<Sample> packs_;
};

}  // namespace

absl::StatusOr<Dataset> PackDataset(const Dataset& dataset, const PackOptions& options) {
  if (options.max_seq_len <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "packing '", dataset.source(), "': max_seq_len (", options.max_seq_len, ") must be > 0"));
  }
  if (options.max_packs < 0) {
    return absl::InvalidArgumentError(absl::StrCat("packing '", dataset.source(), "': max_packs (",
                                                   options.max_packs, ") must be >= 0"));
  }
  if (dataset.packed()) {
    return absl::InvalidArgumentError(
        absl::StrCat("packing '", dataset.source(), "': the dataset is already packed"));
  }
  Packer packer(options);
  CCTUNE_ASSIGN_OR_RETURN(std::vector<Sample> packs, packer.Run(dataset));
  return Dataset(std::move(packs), /*packed=*/true, dataset.source());
}

}  // namespace cctune
