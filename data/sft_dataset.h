// Supervised fine-tuning datasets from local JSON / JSONL / Parquet files (torchtune's
// instruct_dataset / alpaca_dataset and chat_dataset): each record becomes messages
// (data/message_transforms.h), the tokenizer's prompt template turns them into tokens, and
// the masked messages' tokens get label kIgnoreIndex. Samples are cut to max_seq_len.
//
//   InstructDatasetOptions o;
//   o.source = "data/alpaca.jsonl";
//   o.max_seq_len = 512;
//   CCTUNE_ASSIGN_OR_RETURN(Dataset ds, LoadInstructDataset(tokenizer, PromptFormat::kNone, o));
#ifndef CCTUNE_DATA_SFT_DATASET_H_
#define CCTUNE_DATA_SFT_DATASET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/dataset.h"
#include "data/message_transforms.h"
#include "tokenizers/prompt_template.h"
#include "tokenizers/tokenizer.h"

namespace cctune {

struct InstructDatasetOptions {
  std::string source;  // .json (array of objects), .jsonl or .parquet; names the dataset
  std::vector<std::string> files;  // read in order instead of `source` when not empty
  InstructOptions messages;
  int64_t max_seq_len = 0;  // 0: no truncation
  bool truncate_left = false;  // keep the last max_seq_len tokens (qwen2_5_chat)
};

struct ChatDatasetOptions {
  std::string source;
  std::vector<std::string> files;
  ChatOptions messages;
  int64_t max_seq_len = 0;
  bool truncate_left = false;
};

// Errors name the file, the record's line and the column (or message) at fault.
absl::StatusOr<Dataset> LoadInstructDataset(const Tokenizer& tokenizer, PromptFormat format,
                                            const InstructDatasetOptions& options);
absl::StatusOr<Dataset> LoadChatDataset(const Tokenizer& tokenizer, PromptFormat format,
                                        const ChatDatasetOptions& options);

}  // namespace cctune

#endif  // CCTUNE_DATA_SFT_DATASET_H_
