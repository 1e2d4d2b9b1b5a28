// Tokenized training samples and the in-memory dataset that holds them. Datasets here are
// small enough to tokenize up front (as torchtune's PackedDataset does): errors surface before
// training starts, and fetching a sample costs nothing.
//
// labels follow torchtune: aligned with tokens (labels[i] is tokens[i], or kIgnoreIndex where
// position i is not trained on); the recipe shifts them by one position for next-token
// prediction (ShiftLabels in data/collate.h).
#ifndef CCTUNE_DATA_DATASET_H_
#define CCTUNE_DATA_DATASET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tokenizers/prompt_template.h"
#include "tokenizers/tokenizer.h"

namespace cctune {

// torch.nn.CrossEntropyLoss's default ignore_index, as torchtune uses it.
inline constexpr int32_t kIgnoreIndex = -100;

struct Sample {
  std::vector<int32_t> tokens;
  std::vector<int32_t> labels;  // tokens.size() entries
  // Packed samples only (data/packed_dataset.h): the position of each token within its
  // document, and the document lengths in order (they sum to tokens.size(); trailing padding
  // counts as one more "document", as in torchtune).
  std::vector<int32_t> input_pos;
  std::vector<int32_t> seq_lens;
  int32_t num_padding = 0;  // trailing pad tokens (packed samples)
};

class Dataset {
 public:
  Dataset() = default;
  // `source` names where the samples came from, for messages.
  Dataset(std::vector<Sample> samples, bool packed, std::string source)
      : samples_(std::move(samples)), packed_(packed), source_(std::move(source)) {}

  int64_t size() const { return static_cast<int64_t>(samples_.size()); }
  const Sample& operator[](int64_t i) const { return samples_[i]; }
  const std::vector<Sample>& samples() const { return samples_; }
  bool packed() const { return packed_; }
  const std::string& source() const { return source_; }
  // Tokens, and tokens with a label, over all samples (padding excluded).
  int64_t NumTokens() const;
  int64_t NumLabelTokens() const;

 private:
  std::vector<Sample> samples_;
  bool packed_ = false;
  std::string source_;
};

// Hugging Face split syntax over a dataset: "train" (everything), "train[:90%]",
// "train[90%:]", "train[10:20]", "train[-5:]". Percent bounds are floor(n * p / 100).
// InvalidArgument for other spellings or bounds out of range.
absl::StatusOr<Dataset> SelectSplit(const Dataset& dataset, const std::string& split);
// The name part of a split: "validation" of "validation[:10%]". InvalidArgument for an empty
// or malformed name (combining splits with '+' is not supported).
absl::StatusOr<std::string> SplitName(const std::string& split);
// The [start:end] slice of `split`, whatever its name, applied to `dataset` (the dataset the
// name selected); without a slice, the whole dataset.
absl::StatusOr<Dataset> SliceSplit(const Dataset& dataset, const std::string& split);

// Tokenizes `messages` with `format` (truncating to max_seq_len when > 0, as the template
// does; truncate_left: keeping the last tokens, TokenizeMessagesOptions) and turns the loss
// mask into labels.
absl::StatusOr<Sample> SampleFromMessages(const Tokenizer& tokenizer, PromptFormat format,
                                          absl::Span<const Message> messages, int64_t max_seq_len,
                                          bool truncate_left = false);

}  // namespace cctune

#endif  // CCTUNE_DATA_DATASET_H_
