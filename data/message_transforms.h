// Dataset records -> chat messages, in torchtune's formats (torchtune/data/_messages.py):
//
//   Instruct, template "alpaca" (AlpacaToMessages): columns instruction, input (optional or
//     empty) and output; the user message is the Stanford Alpaca prompt
//       "Below is an instruction that describes a task[, paired with an input ...]. Write a
//        response that appropriately completes the request.\n\n### Instruction:\n{instruction}
//        \n\n[### Input:\n{input}\n\n]### Response:\n"
//     and the assistant message is the output.
//   Instruct, template "input_output" (InputOutputToMessages): columns input -> user,
//     output -> assistant.
//   Chat, style "openai" (OpenAIToMessages): column `messages`, a list of
//     {"role": system|user|assistant|ipython|tool, "content": text or [{"type": "text",
//     "text": ...}, ...]}.
//   Chat, style "sharegpt" (ShareGPTToMessages): column `conversations`, a list of
//     {"from": system|human|gpt, "value": text}.
//
// column_map renames the expected columns ({"instruction": "prompt"} reads the instruction
// from the record's "prompt"). With train_on_input false (the default) every message but the
// assistant's is masked out of the loss. new_system_prompt replaces any system message.
#ifndef CCTUNE_DATA_MESSAGE_TRANSFORMS_H_
#define CCTUNE_DATA_MESSAGE_TRANSFORMS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/json_records.h"
#include "tokenizers/prompt_template.h"

namespace cctune {

enum class InstructTemplate { kAlpaca, kInputOutput };
// "alpaca", "input_output".
absl::StatusOr<InstructTemplate> ParseInstructTemplate(const std::string& name);

struct InstructOptions {
  InstructTemplate instruct_template = InstructTemplate::kAlpaca;
  std::map<std::string, std::string> column_map;  // expected name -> the file's column
  bool train_on_input = false;
  std::string new_system_prompt;  // empty: none
};

enum class ConversationStyle { kOpenAI, kShareGPT };
// "openai", "sharegpt".
absl::StatusOr<ConversationStyle> ParseConversationStyle(const std::string& name);

struct ChatOptions {
  ConversationStyle style = ConversationStyle::kOpenAI;
  // The column holding the conversation; empty: "messages" (openai) / "conversations"
  // (sharegpt).
  std::string conversation_column;
  bool train_on_input = false;
  std::string new_system_prompt;
};

// InvalidArgument for column_map keys the template does not use (listing the valid ones).
absl::Status ValidateInstructOptions(const InstructOptions& options);

// Record i of `records` as messages; errors name file:line and the column / message index.
absl::StatusOr<std::vector<Message>> InstructToMessages(const JsonRecords& records, size_t i,
                                                        const InstructOptions& options);
absl::StatusOr<std::vector<Message>> ChatToMessages(const JsonRecords& records, size_t i,
                                                    const ChatOptions& options);

}  // namespace cctune

#endif  // CCTUNE_DATA_MESSAGE_TRANSFORMS_H_
