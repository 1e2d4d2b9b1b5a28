// Chat messages -> token ids plus a loss mask, in the formats the Llama models were tuned on:
//   llama3_chat: <|begin_of_text|> then per message
//                <|start_header_id|>role<|end_header_id|>\n\n content <|eot_id|>
//                (torchtune's Llama3Tokenizer.tokenize_messages), <|end_of_text|> at the end;
//   llama2_chat: Meta's [INST] format: "[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST]"
//                then " {assistant}" and EOS, BOS at each turn (torchtune's
//                Llama2ChatTemplate with tokenize_messages_no_special_tokens);
//   mistral_chat: torchtune's MistralChatTemplate: "[INST] {user} [/INST] " then the answer
//                and EOS, BOS at each turn (Llama 2's layout without system prompts, which are
//                an error), with tokenize_messages_no_special_tokens;
//   qwen2_5_chat: ChatML as torchtune's Qwen2_5Tokenizer.tokenize_messages lays it out:
//                <|im_start|>role\n content <|im_end|>\n per message (none after a last
//                assistant message), tool calls in <tool_call>\n...\n</tool_call>, ipython
//                results as a user turn of <tool_response>\n...\n</tool_response> blocks, EOS
//                (<|im_end|>) at the end; truncation as torchtune's truncate() (the last
//                token of a cut or limited sequence becomes EOS, its mask 1);
//   none:        the contents concatenated, BOS at each turn and EOS after each answer.
// InferencePrompt() leaves the assistant's turn open so that generation continues it.
#ifndef CCTUNE_TOKENIZERS_PROMPT_TEMPLATE_H_
#define CCTUNE_TOKENIZERS_PROMPT_TEMPLATE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tokenizers/tokenizer.h"

namespace cctune {

enum class Role { kSystem, kUser, kAssistant, kIpython };

// "system", "user", "assistant", "ipython".
absl::StatusOr<Role> ParseRole(std::string_view name);
const char* RoleName(Role role);

struct Message {
  Role role = Role::kUser;
  std::string content;
  bool masked = false;  // true: the message's tokens are excluded from the loss
  // Llama 3 only: end the message with <|eot_id|> (true) or <|eom_id|> (a tool call that
  // expects a result), and start the body with <|python_tag|> (ipython = true).
  bool eot = true;
  bool ipython = false;
};

enum class PromptFormat { kNone, kLlama2Chat, kLlama3Chat, kMistralChat, kQwen2_5Chat };

// "none", "llama2_chat", "llama3_chat", "mistral_chat", "qwen2_5_chat".
absl::StatusOr<PromptFormat> ParsePromptFormat(std::string_view name);
const char* PromptFormatName(PromptFormat format);

struct TokenizedMessages {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> mask;  // per token; 1: excluded from the loss
};

struct TokenizeMessagesOptions {
  // > 0: stop adding messages once this many tokens are reached, then cut to it (torchtune's
  // truncate: the last token becomes EOS when end tokens are added).
  int64_t max_seq_len = 0;
  // false: the last message is left open (no <|eot_id|> / EOS after it).
  bool add_end_tokens = true;
  // qwen2_5_chat: keep the first (false, torchtune's "right") or the last max_seq_len tokens.
  bool truncate_left = false;
};

absl::StatusOr<TokenizedMessages> TokenizeMessages(const Tokenizer& tokenizer,
                                                   PromptFormat format,
                                                   absl::Span<const Message> messages,
                                                   const TokenizeMessagesOptions& options = {});

// The prompt for generation: `messages` (usually ending with a user message), then the
// opening of the assistant's turn: "...<|start_header_id|>assistant<|end_header_id|>\n\n" for
// llama3_chat; for llama2_chat and none the ids end after "[/INST]" / the last message.
absl::StatusOr<std::vector<int32_t>> InferencePrompt(const Tokenizer& tokenizer,
                                                     PromptFormat format,
                                                     absl::Span<const Message> messages);

}  // namespace cctune

#endif  // CCTUNE_TOKENIZERS_PROMPT_TEMPLATE_H_
