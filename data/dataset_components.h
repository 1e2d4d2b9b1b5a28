// Datasets as config components (kind "dataset"), with torchtune's builder names and keys;
// the recipe passes the tokenizer, its prompt format and its max_seq_len
// (torchtune: instantiate(cfg.dataset, tokenizer)):
//   cctune.datasets.instruct_dataset         input/output columns (InputOutputToMessages)
//   cctune.datasets.alpaca_dataset           instruction/input/output, the Alpaca prompt
//   cctune.datasets.chat_dataset             conversation_style openai | sharegpt
//   cctune.datasets.text_completion_dataset  a text column, trained on in full
// Common keys: source (a local .json / .jsonl path; or source: json with data_files: PATH,
// as torchtune configs load local files), split (train, train[:90%], ...), packed
// (torchtune's PackedDataset to the tokenizer's max_seq_len) and split_across_pack. Samples
// are cut to the tokenizer's max_seq_len when it has one. torchtune.datasets.* resolve here.
#ifndef CCTUNE_DATA_DATASET_COMPONENTS_H_
#define CCTUNE_DATA_DATASET_COMPONENTS_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "config/registry.h"
#include "data/dataset.h"
#include "tokenizers/prompt_template.h"
#include "tokenizers/tokenizer.h"

namespace cctune {

struct DatasetContext {
  const Tokenizer* tokenizer = nullptr;
  PromptFormat prompt_format = PromptFormat::kNone;
  int64_t max_seq_len = 0;  // 0: none (packed: true then fails)
};

using DatasetRegistryT = Registry<std::shared_ptr<const Dataset>, const DatasetContext&>;
// Component kind "dataset".
DatasetRegistryT& DatasetRegistry();

// Registers the datasets above (idempotent, thread-safe).
absl::Status RegisterDatasets();

}  // namespace cctune

#endif  // CCTUNE_DATA_DATASET_COMPONENTS_H_
