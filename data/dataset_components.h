// Datasets as config components (kind "dataset"), with torchtune's builder names and keys;
// the recipe passes the tokenizer, its prompt format and its max_seq_len
// (torchtune: instantiate(cfg.dataset, tokenizer)):
//   cctune.datasets.instruct_dataset         input/output columns (InputOutputToMessages)
//   cctune.datasets.alpaca_dataset           instruction/input/output, the Alpaca prompt
//   cctune.datasets.chat_dataset             conversation_style openai | sharegpt
//   cctune.datasets.text_completion_dataset  a text column, trained on in full
//   cctune.data.synthetic_arithmetic         "a+b=c" samples generated from a seed (see
//                                            SyntheticArithmeticText), the prompt "a+b="
//                                            masked out of the loss; no file
// Common keys: source (a local .json / .jsonl path; or source: json with data_files: PATH,
// as torchtune configs load local files), split (train, train[:90%], ...), packed
// (torchtune's PackedDataset to the tokenizer's max_seq_len) and split_across_pack. Samples
// are cut to the tokenizer's max_seq_len when it has one. torchtune.datasets.* resolve here.
#ifndef CCTUNE_DATA_DATASET_COMPONENTS_H_
#define CCTUNE_DATA_DATASET_COMPONENTS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

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

// The i-th sample (0-based) of the synthetic arithmetic set with `seed`: operands are uniform
// in [0, 10^max_digits) from a Philox stream keyed by `seed` at counter 2 * i; returns the
// prompt "a+b=" and the answer "c" (decimal, no leading zeros). Pure function of its inputs.
std::pair<std::string, std::string> SyntheticArithmeticText(uint64_t seed, int64_t index,
                                                            int64_t max_digits);

// Registers the datasets above (idempotent, thread-safe).
absl::Status RegisterDatasets();

}  // namespace cctune

#endif  // CCTUNE_DATA_DATASET_COMPONENTS_H_
