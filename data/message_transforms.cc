#include "data/message_transforms.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status.h"

namespace cctune {
namespace {

using Json = nlohmann::json;

constexpr char kAlpacaWithInput[] =
    "Below is an instruction that describes a task, paired with an input that provides "
    "further context. Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n";
constexpr char kAlpacaNoInput[] =
    "Below is an instruction that describes a task. Write a response that appropriately "
    "completes the request.\n\n### Instruction:\n";

std::vector<std::string> TemplateColumns(InstructTemplate t) {
  if (t == InstructTemplate::kAlpaca) return {"instruction", "input", "output"};
  return {"input", "output"};
}

std::string Mapped(const std::map<std::string, std::string>& column_map, const std::string& name) {
  auto it = column_map.find(name);
  return it == column_map.end() ? name : it->second;
}

Message MakeMessage(Role role, std::string content, bool masked) {
  Message m;
  m.role = role;
  m.content = std::move(content);
  m.masked = masked;
  return m;
}

// OpenAI content: a string, or a list of parts of which the "text" ones are concatenated.
absl::StatusOr<std::string> ContentText(const Json& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_array()) {
    std::string text;
    for (size_t k = 0; k < content.size(); ++k) {
      const Json& part = content[k];
      if (!part.is_object() || !part.contains("type")) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": content part ", k, " is not an object with a 'type'"));
      }
      if (part["type"] != "text") {
        return absl::UnimplementedError(absl::StrCat(where, ": content part ", k, " has type ",
                                                     part["type"].dump(),
                                                     "; only text parts are supported"));
      }
      if (!part.contains("text") || !part["text"].is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": content part ", k, " has no string 'text'"));
      }
      text += part["text"].get<std::string>();
    }
    return text;
  }
  return absl::InvalidArgumentError(absl::StrCat(where, ": 'content' is a JSON ",
                                                 content.type_name(),
                                                 ", expected a string or a list of parts"));
}

absl::StatusOr<std::string> StringField(const Json& obj, const char* key,
                                        const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    std::vector<std::string> keys;
    for (auto kv = obj.begin(); kv != obj.end(); ++kv) keys.push_back(kv.key());
    return absl::InvalidArgumentError(
        absl::StrCat(where, " has no '", key, "' (it has ",
                     keys.empty() ? "no keys" : absl::StrJoin(keys, ", "), ")"));
  }
  if (!it->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": '", key, "' is a JSON ", it->type_name(), ", expected a string"));
  }
  return it->get<std::string>();
}

}  // namespace

absl::StatusOr<InstructTemplate> ParseInstructTemplate(const std::string& name) {
  if (name == "alpaca") return InstructTemplate::kAlpaca;
  if (name == "input_output") return InstructTemplate::kInputOutput;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown instruct template '", name, "'; expected alpaca or input_output"));
}

absl::StatusOr<ConversationStyle> ParseConversationStyle(const std::string& name) {
  if (name == "openai") return ConversationStyle::kOpenAI;
  if (name == "sharegpt") return ConversationStyle::kShareGPT;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown conversation_style '", name, "'; expected openai or sharegpt"));
}

absl::Status ValidateInstructOptions(const InstructOptions& options) {
  const std::vector<std::string> valid = TemplateColumns(options.instruct_template);
  for (const auto& [key, value] : options.column_map) {
    if (std::find(valid.begin(), valid.end(), key) == valid.end()) {
      return absl::InvalidArgumentError(absl::StrCat("column_map key '", key,
                                                     "' is not used by this template; expected ",
                                                     absl::StrJoin(valid, ", ")));
    }
    if (value.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("column_map maps '", key, "' to an empty column name"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Message>> InstructToMessages(const JsonRecords& records, size_t i,
                                                        const InstructOptions& options) {
  const auto& cm = options.column_map;
  std::string user;
  if (options.instruct_template == InstructTemplate::kAlpaca) {
    CCTUNE_ASSIGN_OR_RETURN(std::string instruction,
                            GetStringColumn(records, i, Mapped(cm, "instruction"), "instruction"));
    // The input column may be absent or empty.
    std::string input;
    const std::string input_col = Mapped(cm, "input");
    if (records.records[i].value.contains(input_col)) {
      CCTUNE_ASSIGN_OR_RETURN(input, GetStringColumn(records, i, input_col, "input"));
    }
    user = input.empty() ? absl::StrCat(kAlpacaNoInput, instruction, "\n\n### Response:\n")
                         : absl::StrCat(kAlpacaWithInput, instruction, "\n\n### Input:\n", input,
                                        "\n\n### Response:\n");
  } else {
    CCTUNE_ASSIGN_OR_RETURN(user, GetStringColumn(records, i, Mapped(cm, "input"), "input"));
  }
  CCTUNE_ASSIGN_OR_RETURN(std::string output,
                          GetStringColumn(records, i, Mapped(cm, "output"), "output"));
  std::vector<Message> messages;
  if (!options.new_system_prompt.empty()) {
    messages.push_back(MakeMessage(Role::kSystem, options.new_system_prompt, true));
  }
  messages.push_back(MakeMessage(Role::kUser, std::move(user), !options.train_on_input));
  messages.push_back(MakeMessage(Role::kAssistant, std::move(output), false));
  return messages;
}

absl::StatusOr<std::vector<Message>> ChatToMessages(const JsonRecords& records, size_t i,
                                                    const ChatOptions& options) {
  const bool openai = options.style == ConversationStyle::kOpenAI;
  const std::string column = !options.conversation_column.empty()
                                 ? options.conversation_column
                                 : (openai ? "messages" : "conversations");
  CCTUNE_ASSIGN_OR_RETURN(const Json* list, GetColumn(records, i, column));
  if (!list->is_array() || list->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        records.Where(i), ": column '", column, "' must be a non-empty list of messages, got ",
        list->is_array() ? "an empty list" : absl::StrCat("a JSON ", list->type_name())));
  }
  std::vector<Message> messages;
  if (!options.new_system_prompt.empty()) {
    messages.push_back(MakeMessage(Role::kSystem, options.new_system_prompt, true));
  }
  for (size_t k = 0; k < list->size(); ++k) {
    const Json& m = (*list)[k];
    const std::string where = absl::StrCat(records.Where(i), ": message ", k, " of '", column, "'");
    if (!m.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " is a JSON ", m.type_name(), ", expected an object"));
    }
    Role role;
    std::string content;
    if (openai) {
      CCTUNE_ASSIGN_OR_RETURN(std::string role_name, StringField(m, "role", where));
      if (role_name == "tool") role_name = "ipython";
      absl::StatusOr<Role> parsed = ParseRole(role_name);
      if (!parsed.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": ", parsed.status().message()));
      }
      role = *parsed;
      if (!m.contains("content")) {
        return absl::InvalidArgumentError(absl::StrCat(where, " has no 'content'"));
      }
      CCTUNE_ASSIGN_OR_RETURN(content, ContentText(m["content"], where));
    } else {
      CCTUNE_ASSIGN_OR_RETURN(const std::string from, StringField(m, "from", where));
      if (from == "system") {
        role = Role::kSystem;
      } else if (from == "human") {
        role = Role::kUser;
      } else if (from == "gpt") {
        role = Role::kAssistant;
      } else {
        return absl::InvalidArgumentError(absl::StrCat(where, ": unknown 'from' value '", from,
                                                       "'; expected system, human or gpt"));
      }
      CCTUNE_ASSIGN_OR_RETURN(content, StringField(m, "value", where));
    }
    if (role == Role::kSystem && !options.new_system_prompt.empty()) continue;
    const bool masked = role != Role::kAssistant && !options.train_on_input;
    messages.push_back(MakeMessage(role, std::move(content), masked));
  }
  return messages;
}

}  // namespace cctune
