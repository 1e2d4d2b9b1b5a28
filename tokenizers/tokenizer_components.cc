#include "tokenizers/tokenizer_components.h"

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "config/key_limits.h"
#include "core/status.h"
#include "tokenizers/byte_tokenizer.h"
#include "tokenizers/llama2c.h"
#include "tokenizers/sentencepiece.h"
#include "tokenizers/tiktoken.h"

namespace cctune {

namespace {

absl::Status FileExists(const ConfigNode& node) {
  if (node.kind() != ConfigNode::Kind::kString) return absl::OkStatus();
  std::error_code ec;
  if (std::filesystem::is_regular_file(node.string_value(), ec)) return absl::OkStatus();
  return absl::NotFoundError(
      absl::StrCat("tokenizer file '", node.string_value(), "' does not exist"));
}

absl::Status PositiveOrNull(const ConfigNode& node) {
  if (node.kind() == ConfigNode::Kind::kInt && node.int_value() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_seq_len (", node.int_value(), ") must be positive or null"));
  }
  return absl::OkStatus();
}

Schema TokenizerSchema(std::string doc, std::string template_doc) {
  return Schema("", std::move(doc))
      .Required("path", KeyType::String(), "the tokenizer file")
      .Check("path", FileExists)
      .Default("max_seq_len", KeyType::Int().InRange(1, kMaxSeqLenKey).OrNull(),
               ConfigNode::Null(), "longest tokenized sample or prompt (null: no limit)")
      .Check("max_seq_len", PositiveOrNull)
      .Default("prompt_template", KeyType::String().OrNull(), ConfigNode::Null(),
               std::move(template_doc));
}

// prompt_template spellings -> formats. `allowed` lists what this tokenizer accepts.
absl::StatusOr<PromptFormat> ParseTemplate(const ConfigNode& node, PromptFormat if_null,
                                           const std::vector<PromptFormat>& allowed) {
  CCTUNE_ASSIGN_OR_RETURN(std::optional<std::string> name,
                          node.GetOptionalString("prompt_template"));
  if (!name.has_value()) return if_null;
  PromptFormat format;
  if (*name == "torchtune.models.llama2.Llama2ChatTemplate" ||
      *name == "cctune.models.llama2.Llama2ChatTemplate" || *name == "llama2_chat") {
    format = PromptFormat::kLlama2Chat;
  } else if (*name == "llama3_chat") {
    format = PromptFormat::kLlama3Chat;
  } else if (*name == "none") {
    format = PromptFormat::kNone;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt_template '", *name,
                     "' is not supported; use null, none, llama2_chat "
                     "(torchtune.models.llama2.Llama2ChatTemplate) or llama3_chat"));
  }
  for (PromptFormat a : allowed) {
    if (a == format) return format;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("prompt_template '", *name, "' does not apply to this tokenizer"));
}

absl::Status FillCommon(const ConfigNode& node, TokenizerComponent* out) {
  CCTUNE_ASSIGN_OR_RETURN(out->max_seq_len, node.GetOptionalInt("max_seq_len"));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> TokenizerComponent::DecodeForPrint(
    const std::vector<int32_t>& ids) const {
  if (first_special_id < 0) return tokenizer->Decode(ids);
  std::vector<int32_t> kept;
  kept.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < first_special_id) kept.push_back(id);
  }
  return tokenizer->Decode(kept);
}

TokenizerRegistryT& TokenizerRegistry() {
  static TokenizerRegistryT* const r = new TokenizerRegistryT("tokenizer");
  return *r;
}

absl::Status RegisterTokenizers() {
  static const absl::Status status = [] {
    TokenizerRegistryT& r = TokenizerRegistry();
    CCTUNE_RETURN_IF_ERROR(r.Register(
        "cctune.models.llama3.llama3_tokenizer",
        TokenizerSchema("Llama 3 tiktoken tokenizer (tokenizer.model)",
                        "null or llama3_chat: Llama 3 headers (always applied)")
            .Optional("special_tokens_path", KeyType::String().OrNull(),
                      "unsupported; must be null"),
        [](const ConfigNode& node) -> absl::StatusOr<TokenizerComponent> {
          CCTUNE_ASSIGN_OR_RETURN(std::optional<std::string> special,
                                  node.GetOptionalString("special_tokens_path"));
          if (special.has_value()) {
            return absl::UnimplementedError("special_tokens_path is not supported; use null");
          }
          TokenizerComponent out;
          CCTUNE_RETURN_IF_ERROR(FillCommon(node, &out));
          CCTUNE_ASSIGN_OR_RETURN(out.prompt_format, ParseTemplate(node, PromptFormat::kLlama3Chat,
                                                                   {PromptFormat::kLlama3Chat}));
          CCTUNE_ASSIGN_OR_RETURN(std::string path, node.GetString("path"));
          CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<TiktokenTokenizer> tok,
                                  TiktokenTokenizer::Load(path, Llama3TiktokenOptions()));
          out.first_special_id = tok->num_base_tokens();
          out.tokenizer = std::move(tok);
          return out;
        }));
    CCTUNE_RETURN_IF_ERROR(r.Register(
        "cctune.models.llama2.llama2_tokenizer",
        TokenizerSchema("Llama 2 SentencePiece tokenizer (tokenizer.model)",
                        "null (plain text) or torchtune.models.llama2.Llama2ChatTemplate"),
        [](const ConfigNode& node) -> absl::StatusOr<TokenizerComponent> {
          TokenizerComponent out;
          CCTUNE_RETURN_IF_ERROR(FillCommon(node, &out));
          CCTUNE_ASSIGN_OR_RETURN(out.prompt_format,
                                  ParseTemplate(node, PromptFormat::kNone,
                                                {PromptFormat::kNone, PromptFormat::kLlama2Chat}));
          CCTUNE_ASSIGN_OR_RETURN(std::string path, node.GetString("path"));
          CCTUNE_ASSIGN_OR_RETURN(out.tokenizer, MakeLlama2Tokenizer(path));
          return out;
        }));
    CCTUNE_RETURN_IF_ERROR(r.Register(
        "cctune.models.llama2c.llama2c_tokenizer",
        TokenizerSchema("llama2.c tokenizer .bin (e.g. stories260K's tok512.bin)",
                        "null (plain text, as run.c) or llama2_chat")
            .Optional("vocab_size", KeyType::Int(), "require exactly this many tokens"),
        [](const ConfigNode& node) -> absl::StatusOr<TokenizerComponent> {
          TokenizerComponent out;
          CCTUNE_RETURN_IF_ERROR(FillCommon(node, &out));
          CCTUNE_ASSIGN_OR_RETURN(out.prompt_format,
                                  ParseTemplate(node, PromptFormat::kNone,
                                                {PromptFormat::kNone, PromptFormat::kLlama2Chat}));
          CCTUNE_ASSIGN_OR_RETURN(std::string path, node.GetString("path"));
          CCTUNE_ASSIGN_OR_RETURN(std::optional<int64_t> vocab, node.GetOptionalInt("vocab_size"));
          CCTUNE_ASSIGN_OR_RETURN(
              out.tokenizer, MakeLlama2cTokenizer(path, static_cast<int32_t>(vocab.value_or(0))));
          return out;
        }));
    // The project's byte-level tokenizer (the demo model's): needs no file.
    CCTUNE_RETURN_IF_ERROR(TokenizerRegistry().Register(
        "cctune.data.byte_tokenizer",
        Schema("", "byte-level tokenizer (256 bytes + 8 Llama 3 special tokens, vocab 264)")
            .Default("max_seq_len", KeyType::Int().InRange(1, kMaxSeqLenKey).OrNull(),
                     ConfigNode::Null(), "samples are cut to this many tokens")
            .Check("max_seq_len", PositiveOrNull),
        [](const ConfigNode& node) -> absl::StatusOr<TokenizerComponent> {
          TokenizerComponent t;
          t.tokenizer = std::make_unique<ByteTokenizer>();
          CCTUNE_ASSIGN_OR_RETURN(t.max_seq_len, node.GetOptionalInt("max_seq_len"));
          return t;
        }));
    return absl::OkStatus();
  }();
  return status;
}

}  // namespace cctune
