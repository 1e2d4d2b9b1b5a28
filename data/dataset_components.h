// Datasets as config components (kind "dataset"), with torchtune's builder names, keys and
// defaults; the recipe passes the tokenizer, its prompt format and its max_seq_len
// (torchtune: instantiate(cfg.dataset, tokenizer)). torchtune.datasets.* resolve here.
//   generic (source required):
//     cctune.datasets.instruct_dataset         input/output columns (InputOutputToMessages)
//     cctune.datasets.chat_dataset             conversation_style openai | sharegpt
//     cctune.datasets.text_completion_dataset  a text column, trained on in full
//   named (torchtune's default source):
//     alpaca_dataset (tatsu-lab/alpaca), alpaca_cleaned_dataset (yahma/alpaca-cleaned):
//       instruction/input/output with the Alpaca prompt, train_on_input true
//     samsum_dataset (Samsung/samsum): dialogue -> summary
//     grammar_dataset (liweili/c4_200m): input -> output
//     slimorca_dataset (Open-Orca/SlimOrca-Dedup): ShareGPT conversations
//     wikitext_dataset (EleutherAI/wikitext_document_level, subset wikitext-103-v1): page
//     cnn_dailymail_articles_dataset (ccdv/cnn_dailymail, name 3.0.0): article
//   cctune.data.synthetic_arithmetic: "a+b=c" samples generated from a seed (see
//     SyntheticArithmeticText), the prompt "a+b=" masked out of the loss; no file
//     stack_exchange_paired_dataset, hh_rlhf_helpful_dataset, preference_dataset: preference
//       data; they validate, and building one is Unimplemented (no DPO / PPO recipe)
// Common keys: source, data_files, name (wikitext: subset), data_dir, revision, resolved by
// data/hf_hub.h (the local Hugging Face hub cache, a folder, a file, or 'json' + data_files);
// split (train, validation[:10%], ...); packed (torchtune's PackedDataset to the tokenizer's
// max_seq_len) and split_across_pack; filter_fn (null only). Samples are cut to the
// tokenizer's max_seq_len when it has one.
#ifndef CCTUNE_DATA_DATASET_COMPONENTS_H_
#define CCTUNE_DATA_DATASET_COMPONENTS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

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
  // The tokenizer's truncation_type is left: instruct and chat samples keep their last
  // max_seq_len tokens (text completion samples are always cut on the right, as torchtune's).
  bool truncate_left = false;
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

// The files dataset component `node` reads, resolved as its builder does (defaults applied)
// without loading them: a recipe's up-front check. Empty for a component without a source
// (cctune.data.synthetic_arithmetic) or of another kind.
absl::StatusOr<std::vector<std::string>> ResolveDatasetFiles(const ConfigNode& node);

}  // namespace cctune

#endif  // CCTUNE_DATA_DATASET_COMPONENTS_H_
