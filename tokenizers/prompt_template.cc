#include "tokenizers/prompt_template.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "tokenizers/utf8.h"

namespace cctune {
namespace {

// Python's str.isspace() for one code point given as UTF-8.
bool IsPythonSpace(std::string_view c) {
  if (c.size() == 1) {
    const uint8_t b = static_cast<uint8_t>(c[0]);
    return b == ' ' || (b >= 0x09 && b <= 0x0D) || (b >= 0x1C && b <= 0x1F);
  }
  static const char* kSpaces[] = {"\xC2\x85", "\xC2\xA0", "\xE1\x9A\x80", "\xE2\x80\xA8",
                                  "\xE2\x80\xA9", "\xE2\x80\xAF", "\xE2\x81\x9F",
                                  "\xE3\x80\x80"};
  for (const char* s : kSpaces) {
    if (c == s) return true;
  }
  // U+2000..U+200A
  return c.size() == 3 && static_cast<uint8_t>(c[0]) == 0xE2 &&
         static_cast<uint8_t>(c[1]) == 0x80 && static_cast<uint8_t>(c[2]) <= 0x8A;
}

// Python's str.strip(): leading and trailing Unicode white space.
std::string_view StripPython(std::string_view s) {
  while (!s.empty()) {
    const size_t len = std::max<size_t>(1, Utf8SequenceLength(s));
    if (!IsPythonSpace(s.substr(0, len))) break;
    s.remove_prefix(len);
  }
  while (!s.empty()) {
    // The last character starts at the last non-continuation byte.
    size_t start = s.size() - 1;
    while (start > 0 && s.size() - start < 4 && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) {
      --start;
    }
    if (!IsPythonSpace(s.substr(start))) break;
    s.remove_suffix(s.size() - start);
  }
  return s;
}

std::string_view RStripSpaces(std::string_view s) {
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

void Append(TokenizedMessages* out, absl::Span<const int32_t> ids, bool masked) {
  out->tokens.insert(out->tokens.end(), ids.begin(), ids.end());
  out->mask.insert(out->mask.end(), ids.size(), masked ? 1 : 0);
}

// torchtune's truncate(): keep max_seq_len tokens; with an end token, the last becomes it.
// `dropped`: messages were left out at the limit, which counts as a cut.
void Truncate(TokenizedMessages* out, int64_t max_seq_len, std::optional<int32_t> end_token,
              std::optional<bool> end_mask, bool dropped = false) {
  // Unlike torchtune, a whole conversation within the limit keeps its last token (torchtune
  // turns it into EOS, which matters only when the last message is not an answer, as in an
  // inference prompt). A cut one ends as torchtune's does.
  if (max_seq_len <= 0 || out->tokens.empty()) return;
  if (static_cast<int64_t>(out->tokens.size()) <= max_seq_len && !dropped) return;
  if (static_cast<int64_t>(out->tokens.size()) > max_seq_len) {
    out->tokens.resize(max_seq_len);
    out->mask.resize(max_seq_len);
  }
  if (end_token.has_value()) out->tokens.back() = *end_token;
  if (end_mask.has_value()) out->mask.back() = *end_mask ? 1 : 0;
}

absl::StatusOr<int32_t> RequireSpecial(const Tokenizer& tok, const char* token,
                                       PromptFormat format = PromptFormat::kLlama3Chat) {
  const std::optional<int32_t> id = tok.SpecialTokenId(token);
  if (!id.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt format ", PromptFormatName(format), " needs the special token ", token,
        ", which this tokenizer lacks (use a ",
        format == PromptFormat::kLlama3Chat ? "Llama 3 tokenizer, or llama2_chat / none)"
                                            : "Qwen2.5 tokenizer)"));
  }
  return *id;
}

absl::StatusOr<TokenizedMessages> TokenizeLlama3(const Tokenizer& tok,
                                                 absl::Span<const Message> messages,
                                                 const TokenizeMessagesOptions& options) {
  CCTUNE_ASSIGN_OR_RETURN(const int32_t start_header, RequireSpecial(tok, "<|start_header_id|>"));
  CCTUNE_ASSIGN_OR_RETURN(const int32_t end_header, RequireSpecial(tok, "<|end_header_id|>"));
  CCTUNE_ASSIGN_OR_RETURN(const int32_t eot, RequireSpecial(tok, "<|eot_id|>"));
  CCTUNE_ASSIGN_OR_RETURN(const int32_t eom, RequireSpecial(tok, "<|eom_id|>"));
  CCTUNE_ASSIGN_OR_RETURN(const int32_t python_tag, RequireSpecial(tok, "<|python_tag|>"));
  TokenizedMessages out;
  Append(&out, {tok.bos_id()}, true);  // BOS and the final EOS are always masked
  std::vector<int32_t> ids;
  for (size_t i = 0; i < messages.size(); ++i) {
    const Message& m = messages[i];
    ids.clear();
    ids.push_back(start_header);
    tok.EncodeAppend(RoleName(m.role), EncodeOptions(), &ids);
    ids.push_back(end_header);
    tok.EncodeAppend("\n\n", EncodeOptions(), &ids);
    if (m.ipython) ids.push_back(python_tag);
    tok.EncodeAppend(StripPython(m.content), EncodeOptions(), &ids);
    const bool last = i + 1 == messages.size();
    if (!last || options.add_end_tokens) ids.push_back(m.eot ? eot : eom);
    Append(&out, ids, m.masked);
    if (options.max_seq_len > 0 && static_cast<int64_t>(out.tokens.size()) >= options.max_seq_len) {
      break;
    }
  }
  if (options.add_end_tokens) Append(&out, {tok.eos_id()}, true);
  if (options.add_end_tokens) {
    Truncate(&out, options.max_seq_len, tok.eos_id(), true);
  } else {
    Truncate(&out, options.max_seq_len, std::nullopt, std::nullopt);
  }
  return out;
}

// torchtune's truncate() with its qwen2_5 arguments: the first (or last) max_seq_len tokens,
// then, with end tokens, the last token becomes EOS and its mask 1 (even within the limit).
void TruncateTorchtune(TokenizedMessages* out, int64_t max_seq_len, bool left,
                       std::optional<int32_t> end_token) {
  if (max_seq_len <= 0 || out->tokens.empty()) return;
  if (static_cast<int64_t>(out->tokens.size()) > max_seq_len) {
    const size_t drop = out->tokens.size() - max_seq_len;
    if (left) {
      out->tokens.erase(out->tokens.begin(), out->tokens.begin() + drop);
      out->mask.erase(out->mask.begin(), out->mask.begin() + drop);
    } else {
      out->tokens.resize(max_seq_len);
      out->mask.resize(max_seq_len);
    }
  }
  if (end_token.has_value()) {
    out->tokens.back() = *end_token;
    out->mask.back() = 1;
  }
}

// torchtune's Qwen2_5Tokenizer.tokenize_messages (prompt_template None).
absl::StatusOr<TokenizedMessages> TokenizeQwen2_5(const Tokenizer& tok,
                                                  absl::Span<const Message> messages,
                                                  const TokenizeMessagesOptions& options) {
  constexpr PromptFormat kQwen = PromptFormat::kQwen2_5Chat;
  CCTUNE_ASSIGN_OR_RETURN(const int32_t im_start, RequireSpecial(tok, "<|im_start|>", kQwen));
  CCTUNE_ASSIGN_OR_RETURN(const int32_t im_end, RequireSpecial(tok, "<|im_end|>", kQwen));
  CCTUNE_ASSIGN_OR_RETURN(const int32_t call_start, RequireSpecial(tok, "<tool_call>", kQwen));
  CCTUNE_ASSIGN_OR_RETURN(const int32_t call_end, RequireSpecial(tok, "</tool_call>", kQwen));
  std::vector<int32_t> ids;
  auto text = [&](std::string_view s) { tok.EncodeAppend(s, EncodeOptions(), &ids); };
  auto start = [&](const char* role) {
    ids.push_back(im_start);
    text(absl::StrCat(role, "\n"));
  };
  auto end = [&] {
    ids.push_back(im_end);
    text("\n");
  };
  TokenizedMessages out;
  const size_t n = messages.size();
  for (size_t i = 0; i < n; ++i) {
    const Message& m = messages[i];
    ids.clear();
    const bool tool = m.role == Role::kIpython;
    const bool call = m.role == Role::kAssistant && m.ipython;
    if (tool) {
      if (i == 0 || messages[i - 1].role != Role::kIpython) {
        start("user");
        text("<tool_response>\n");
      } else {
        text("\n<tool_response>\n");
      }
    } else {
      start(RoleName(m.role));
      if (call) {
        ids.push_back(call_start);
        text("\n");
      }
    }
    text(m.content);
    if (tool) {
      text("\n</tool_response>");
      if (i + 1 == n || messages[i + 1].role != Role::kIpython) end();
    } else {
      if (call) {
        text("\n");
        ids.push_back(call_end);
      }
      if (m.role != Role::kAssistant || i + 1 != n) end();
    }
    Append(&out, ids, m.masked);
    if (options.max_seq_len > 0 && static_cast<int64_t>(out.tokens.size()) >= options.max_seq_len) {
      break;
    }
  }
  if (options.add_end_tokens) {
    Append(&out, {tok.eos_id()}, out.mask.empty() || out.mask.back() != 0);
  }
  TruncateTorchtune(&out, options.max_seq_len, options.truncate_left,
                    options.add_end_tokens ? std::optional<int32_t>(tok.eos_id()) : std::nullopt);
  return out;
}

// Meta's Llama 2 chat layout applied to the message texts: a system prompt goes into the
// first user message after it (Meta's chat_completion; torchtune's template repeats it in
// every later user message).
std::vector<Message> ApplyLlama2Template(absl::Span<const Message> messages) {
  std::vector<Message> out;
  std::string system;
  for (const Message& m : messages) {
    if (m.role == Role::kSystem) {
      system = absl::StrCat("<<SYS>>\n", m.content, "\n<</SYS>>\n\n");
      continue;
    }
    Message formatted = m;
    if (m.role == Role::kUser) {
      formatted.content = absl::StrCat("[INST] ", system, m.content, " [/INST] ");
      system.clear();
    }
    out.push_back(std::move(formatted));
  }
  return out;
}

// torchtune's tokenize_messages_no_special_tokens: BOS at the start of each turn, EOS after
// each assistant message; a message that continues a turn is encoded without the tokenizer's
// dummy-prefix space unless the previous one ended with a space.
TokenizedMessages TokenizePlain(const Tokenizer& tok, absl::Span<const Message> messages,
                                const TokenizeMessagesOptions& options) {
  TokenizedMessages out;
  bool start_of_turn = true;
  bool prev_ends_with_space = false;
  bool last_masked = false;
  bool dropped = false;
  std::vector<int32_t> ids;
  for (size_t i = 0; i < messages.size(); ++i) {
    const Message& m = messages[i];
    last_masked = m.masked;
    const bool end_of_turn = m.role == Role::kAssistant;
    if (start_of_turn) Append(&out, {tok.bos_id()}, m.masked);
    EncodeOptions encode;
    encode.trim_leading_whitespace = !start_of_turn && !prev_ends_with_space;
    ids.clear();
    tok.EncodeAppend(RStripSpaces(m.content), encode, &ids);
    prev_ends_with_space = !m.content.empty() && m.content.back() == ' ';
    Append(&out, ids, m.masked);
    const bool last = i + 1 == messages.size();
    if (end_of_turn) {
      if (!last || options.add_end_tokens) Append(&out, {tok.eos_id()}, m.masked);
      start_of_turn = true;
    } else {
      start_of_turn = false;
    }
    if (options.max_seq_len > 0 && static_cast<int64_t>(out.tokens.size()) >= options.max_seq_len) {
      dropped = !last;
      break;
    }
  }
  Truncate(&out, options.max_seq_len, tok.eos_id(), last_masked, dropped);
  return out;
}

}  // namespace

// torchtune's MistralChatTemplate: Llama 2's [INST] tags without system prompts.
absl::StatusOr<std::vector<Message>> ApplyMistralTemplate(absl::Span<const Message> messages) {
  for (const Message& m : messages) {
    if (m.role == Role::kSystem) {
      return absl::InvalidArgumentError(
          "system prompts are not supported by mistral_chat (torchtune's MistralChatTemplate)");
    }
  }
  return ApplyLlama2Template(messages);
}

absl::StatusOr<Role> ParseRole(std::string_view name) {
  if (name == "system") return Role::kSystem;
  if (name == "user") return Role::kUser;
  if (name == "assistant") return Role::kAssistant;
  if (name == "ipython") return Role::kIpython;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown message role '", std::string(name),
                   "'; expected system, user, assistant or ipython"));
}

const char* RoleName(Role role) {
  switch (role) {
    case Role::kSystem: return "system";
    case Role::kUser: return "user";
    case Role::kAssistant: return "assistant";
    case Role::kIpython: return "ipython";
  }
  return "?";
}

absl::StatusOr<PromptFormat> ParsePromptFormat(std::string_view name) {
  if (name == "none") return PromptFormat::kNone;
  if (name == "llama2_chat") return PromptFormat::kLlama2Chat;
  if (name == "llama3_chat") return PromptFormat::kLlama3Chat;
  if (name == "mistral_chat") return PromptFormat::kMistralChat;
  if (name == "qwen2_5_chat") return PromptFormat::kQwen2_5Chat;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown prompt format '", std::string(name),
                   "'; expected none, llama2_chat, llama3_chat, mistral_chat or qwen2_5_chat"));
}

const char* PromptFormatName(PromptFormat format) {
  switch (format) {
    case PromptFormat::kNone: return "none";
    case PromptFormat::kLlama2Chat: return "llama2_chat";
    case PromptFormat::kLlama3Chat: return "llama3_chat";
    case PromptFormat::kMistralChat: return "mistral_chat";
    case PromptFormat::kQwen2_5Chat: return "qwen2_5_chat";
  }
  return "?";
}

absl::StatusOr<TokenizedMessages> TokenizeMessages(const Tokenizer& tokenizer,
                                                   PromptFormat format,
                                                   absl::Span<const Message> messages,
                                                   const TokenizeMessagesOptions& options) {
  if (options.max_seq_len < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_seq_len (", options.max_seq_len, ") must be >= 0"));
  }
  switch (format) {
    case PromptFormat::kLlama3Chat:
      return TokenizeLlama3(tokenizer, messages, options);
    case PromptFormat::kLlama2Chat: {
      const std::vector<Message> templated = ApplyLlama2Template(messages);
      return TokenizePlain(tokenizer, templated, options);
    }
    case PromptFormat::kMistralChat: {
      CCTUNE_ASSIGN_OR_RETURN(const std::vector<Message> templated,
                              ApplyMistralTemplate(messages));
      return TokenizePlain(tokenizer, templated, options);
    }
    case PromptFormat::kQwen2_5Chat:
      return TokenizeQwen2_5(tokenizer, messages, options);
    case PromptFormat::kNone:
      return TokenizePlain(tokenizer, messages, options);
  }
  return absl::InvalidArgumentError("unknown prompt format");
}

absl::StatusOr<std::vector<int32_t>> InferencePrompt(const Tokenizer& tokenizer,
                                                     PromptFormat format,
                                                     absl::Span<const Message> messages) {
  TokenizeMessagesOptions options;
  options.add_end_tokens = false;
  if (format == PromptFormat::kLlama3Chat || format == PromptFormat::kQwen2_5Chat) {
    // An empty assistant message opens its header, as torchtune's generate recipe does.
    std::vector<Message> with_reply(messages.begin(), messages.end());
    Message reply;
    reply.role = Role::kAssistant;
    with_reply.push_back(reply);
    CCTUNE_ASSIGN_OR_RETURN(TokenizedMessages t,
                            TokenizeMessages(tokenizer, format, with_reply, options));
    return std::move(t.tokens);
  }
  CCTUNE_ASSIGN_OR_RETURN(TokenizedMessages t,
                          TokenizeMessages(tokenizer, format, messages, options));
  return std::move(t.tokens);
}

}  // namespace cctune
