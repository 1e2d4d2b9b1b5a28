// Tokenizers as config components (kind "tokenizer"), with torchtune's names and keys (path,
// max_seq_len, prompt_template):
//   cctune.models.llama3.llama3_tokenizer   Meta's tiktoken tokenizer.model; Llama 3 chat
//                                           headers always (as torchtune's Llama3Tokenizer)
//   cctune.models.llama2.llama2_tokenizer   SentencePiece tokenizer.model; no template, or
//                                           prompt_template:
//                                           torchtune.models.llama2.Llama2ChatTemplate
//   cctune.models.mistral.mistral_tokenizer SentencePiece tokenizer.model; MistralChatTemplate
//                                           ([INST] ... [/INST]) by default, null for none
//   cctune.models.qwen2_5.qwen2_5_tokenizer byte-level BPE: path (vocab.json), merges_file,
//                                           special_tokens_path (tokenizer.json, optional);
//                                           ChatML as torchtune's Qwen2_5Tokenizer
//   cctune.models.llama2c.llama2c_tokenizer llama2.c's tokenizer .bin (run.c's encoding)
//   cctune.data.byte_tokenizer              the project's byte-level tokenizer
//                                           (tokenizers/byte_tokenizer.h; max_seq_len only)
// The torchtune.* spellings resolve to these.
#ifndef CCTUNE_TOKENIZERS_TOKENIZER_COMPONENTS_H_
#define CCTUNE_TOKENIZERS_TOKENIZER_COMPONENTS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "config/registry.h"
#include "tokenizers/prompt_template.h"
#include "tokenizers/tokenizer.h"

namespace cctune {

struct TokenizerComponent {
  std::unique_ptr<Tokenizer> tokenizer;
  PromptFormat prompt_format = PromptFormat::kNone;
  std::optional<int64_t> max_seq_len;  // prompts are cut to this many tokens
  // truncation_type: left (qwen2_5_tokenizer): a sample longer than max_seq_len keeps its
  // last tokens instead of its first (the last one still becomes EOS, as torchtune).
  bool truncate_left = false;
  // Ids that torchtune's decode(skip_special_tokens=True) leaves out of printed text
  // (tiktoken's special tokens); empty for tokenizers whose Decode already drops them.
  int32_t first_special_id = -1;

  // torchtune's decode for printing: special tokens skipped, stopping at nothing.
  absl::StatusOr<std::string> DecodeForPrint(const std::vector<int32_t>& ids) const;
};

using TokenizerRegistryT = Registry<TokenizerComponent>;
// Component kind "tokenizer".
TokenizerRegistryT& TokenizerRegistry();

// Registers the tokenizers above (idempotent, thread-safe).
absl::Status RegisterTokenizers();

}  // namespace cctune

#endif  // CCTUNE_TOKENIZERS_TOKENIZER_COMPONENTS_H_
