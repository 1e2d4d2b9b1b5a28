#include "data/collate.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace cctune {

absl::StatusOr<Batch> Collate(absl::Span<const Sample* const> samples,
                              const CollateOptions& options) {
  if (samples.empty()) return absl::InvalidArgumentError("Collate: empty batch");
  if (options.pad_to_multiple_of < 1) {
    return absl::InvalidArgumentError(absl::StrCat("Collate: pad_to_multiple_of (",
                                                   options.pad_to_multiple_of, ") must be >= 1"));
  }
  const bool packed = !samples[0]->seq_lens.empty();
  size_t longest = 0;
  for (size_t r = 0; r < samples.size(); ++r) {
    const Sample& s = *samples[r];
    if (s.labels.size() != s.tokens.size()) {
      return absl::InvalidArgumentError(absl::StrCat("Collate: sample ", r, " has ",
                                                     s.tokens.size(), " tokens but ",
                                                     s.labels.size(), " labels"));
    }
    if (!s.seq_lens.empty() != packed) {
      return absl::InvalidArgumentError(absl::StrCat("Collate: sample ", r, " is ",
                                                     packed ? "not packed" : "packed",
                                                     " but sample 0 is", packed ? "" : " not"));
    }
    if (packed) {
      if (s.input_pos.size() != s.tokens.size()) {
        return absl::InvalidArgumentError(absl::StrCat("Collate: packed sample ", r, " has ",
                                                       s.input_pos.size(), " positions for ",
                                                       s.tokens.size(), " tokens"));
      }
      if (r > 0 && s.tokens.size() != longest) {
        return absl::InvalidArgumentError(absl::StrCat("Collate: packed sample ", r, " has ",
                                                       s.tokens.size(), " tokens, sample 0 has ",
                                                       longest));
      }
    }
    longest = std::max(longest, s.tokens.size());
  }
  int64_t seq = static_cast<int64_t>(longest);
  if (!packed) {
    const int64_t m = options.pad_to_multiple_of;
    seq = (seq + m - 1) / m * m;
  }
  const int64_t b = static_cast<int64_t>(samples.size());
  Batch batch;
  batch.packed = packed;
  CCTUNE_ASSIGN_OR_RETURN(batch.tokens, Tensor::Full({b, seq}, options.pad_id, DType::kI64));
  CCTUNE_ASSIGN_OR_RETURN(batch.labels, Tensor::Full({b, seq}, options.ignore_index, DType::kI64));
  int64_t* tokens = batch.tokens.data<int64_t>();
  int64_t* labels = batch.labels.data<int64_t>();
  int64_t* pos = nullptr;
  if (packed) {
    CCTUNE_ASSIGN_OR_RETURN(batch.input_pos, Tensor::Zeros({b, seq}, DType::kI64));
    pos = batch.input_pos.data<int64_t>();
  }
  for (int64_t r = 0; r < b; ++r) {
    const Sample& s = *samples[r];
    for (size_t i = 0; i < s.tokens.size(); ++i) {
      tokens[r * seq + i] = s.tokens[i];
      // Labels may use another ignore value than ours; normalise.
      const int32_t l = s.labels[i] == kIgnoreIndex ? options.ignore_index : s.labels[i];
      labels[r * seq + i] = l;
      batch.num_label_tokens += l != options.ignore_index;
      if (pos != nullptr) pos[r * seq + i] = s.input_pos[i];
    }
    batch.num_tokens += static_cast<int64_t>(s.tokens.size()) - s.num_padding;
    if (packed) batch.seq_lens.push_back(s.seq_lens);
  }
  return batch;
}

absl::StatusOr<Tensor> BlockCausalMask(const Batch& batch) {
  if (!batch.tokens.defined() || batch.tokens.dim() != 2) {
    return absl::InvalidArgumentError("BlockCausalMask: the batch has no [b, s] tokens");
  }
  const int64_t b = batch.tokens.size(0), s = batch.tokens.size(1);
  CCTUNE_ASSIGN_OR_RETURN(Tensor mask, Tensor::Zeros({b, s, s}, DType::kBool));
  bool* m = mask.data<bool>();
  for (int64_t r = 0; r < b; ++r) {
    std::vector<int32_t> lens;
    if (batch.packed) {
      lens = batch.seq_lens[r];
      int64_t total = 0;
      for (int32_t l : lens) total += l;
      if (total != s) {
        return absl::InvalidArgumentError(
            absl::StrCat("BlockCausalMask: row ", r, "'s seq_lens sum to ", total, ", not ", s));
      }
    } else {
      lens = {static_cast<int32_t>(s)};
    }
    int64_t start = 0;
    for (int32_t len : lens) {
      for (int64_t i = start; i < start + len; ++i) {
        bool* row = m + (r * s + i) * s;
        std::fill(row + start, row + i + 1, true);
      }
      start += len;
    }
  }
  return mask;
}

absl::StatusOr<Tensor> ShiftLabels(const Tensor& labels, int32_t ignore_index) {
  if (!labels.defined() || labels.dim() != 2 || labels.dtype() != DType::kI64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ShiftLabels: expected [b, s] i64 labels, got ",
        labels.defined()
            ? absl::StrCat(DTypeName(labels.dtype()), " ", ShapeToString(labels.shape()))
            : "undefined"));
  }
  CCTUNE_ASSIGN_OR_RETURN(Tensor src, labels.Contiguous());
  const int64_t b = labels.size(0), s = labels.size(1);
  CCTUNE_ASSIGN_OR_RETURN(Tensor out, Tensor::Full({b, s}, ignore_index, DType::kI64));
  const int64_t* in = src.data<int64_t>();
  int64_t* o = out.data<int64_t>();
  for (int64_t r = 0; r < b; ++r) {
    for (int64_t t = 0; t + 1 < s; ++t) o[r * s + t] = in[r * s + t + 1];
  }
  return out;
}

}  // namespace cctune
