// Plain-text completion datasets from local JSON / JSONL / Parquet files (torchtune's
// text_completion_dataset): each record's text column is encoded with BOS (and EOS, unless
// add_eos is false), cut to max_seq_len without forcing the last token to EOS, and trained on
// in full (labels = tokens).
#ifndef CCTUNE_DATA_TEXT_COMPLETION_DATASET_H_
#define CCTUNE_DATA_TEXT_COMPLETION_DATASET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/dataset.h"
#include "tokenizers/tokenizer.h"

namespace cctune {

struct TextCompletionDatasetOptions {
  std::string source;              // a .json / .jsonl / .parquet file; names the dataset
  std::vector<std::string> files;  // read in order instead of `source` when not empty
  std::string column = "text";
  bool add_eos = true;
  int64_t max_seq_len = 0;  // 0: no truncation
};

absl::StatusOr<Dataset> LoadTextCompletionDataset(const Tokenizer& tokenizer,
                                                  const TextCompletionDatasetOptions& options);

}  // namespace cctune

#endif  // CCTUNE_DATA_TEXT_COMPLETION_DATASET_H_
