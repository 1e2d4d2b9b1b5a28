#include "tokenizers/tokenizer_components.h"

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "config/key_limits.h"
#include "core/status.h"
#include "tokenizers/byte_level_bpe.h"
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

Schema TokenizerSchema(std::string doc, std::string template_doc,
                       ConfigNode default_template = ConfigNode::Null(),
                       std::string path_doc = "the tokenizer file") {
  return Schema("", std::move(doc))
      .Required("path", KeyType::String(), std::move(path_doc))
      .Check("path", FileExists)
      .Default("max_seq_len", KeyType::Int().InRange(1, kMaxSeqLenKey).OrNull(),
               ConfigNode::Null(), "longest tokenized sample or prompt (null: no limit)")
      .Check("max_seq_len", PositiveOrNull)
      .Default("prompt_template", KeyType::String().OrNull(), std::move(default_template),
               std::move(template_doc));
}

absl::Status FileExistsOrNull(const ConfigNode& node) {
  if (node.kind() == ConfigNode::Kind::kNull) return absl::OkStatus();
  return FileExists(node);
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
  } else if (*name == "torchtune.models.mistral.MistralChatTemplate" ||
             *name == "cctune.models.mistral.MistralChatTemplate" || *name == "mistral_chat") {
    format = PromptFormat::kMistralChat;
  } else if (*name == "qwen2_5_chat") {
    format = PromptFormat::kQwen2_5Chat;
  } else if (*name == "torchtune.data.ChatMLTemplate" || *name == "cctune.data.ChatMLTemplate") {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt_template '", *name,
        "' is not supported: Qwen2.5's tokenizer already lays messages out in ChatML (torchtune "
        "refuses the two together); use null"));
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
    CCTUNE_RETURN_IF_ERROR(r.Register(
        "cctune.models.mistral.mistral_tokenizer",
        TokenizerSchema("Mistral SentencePiece tokenizer (tokenizer.model; pad id 0, stops at EOS)",
                        "torchtune.models.mistral.MistralChatTemplate ([INST] ... [/INST], no "
                        "system prompts) or null (plain text)",
                        ConfigNode::String("torchtune.models.mistral.MistralChatTemplate")),
        [](const ConfigNode& node) -> absl::StatusOr<TokenizerComponent> {
          TokenizerComponent out;
          CCTUNE_RETURN_IF_ERROR(FillCommon(node, &out));
          CCTUNE_ASSIGN_OR_RETURN(out.prompt_format,
                                  ParseTemplate(node, PromptFormat::kNone,
                                                {PromptFormat::kNone, PromptFormat::kMistralChat}));
          CCTUNE_ASSIGN_OR_RETURN(std::string path, node.GetString("path"));
          CCTUNE_ASSIGN_OR_RETURN(out.tokenizer, SentencePieceTokenizer::Load(path));
          return out;
        }));
    CCTUNE_RETURN_IF_ERROR(r.Register(
        "cctune.models.qwen2_5.qwen2_5_tokenizer",
        TokenizerSchema("Qwen2.5 byte-level BPE (vocab.json + merges.txt; NFC, Qwen's special "
                        "tokens, ChatML messages as torchtune's Qwen2_5Tokenizer)",
                        "null: ChatML, built into the tokenizer (qwen2_5_chat)", ConfigNode::Null(),
                        "vocab.json")
            .Required("merges_file", KeyType::String(), "merges.txt (merge ranks by line)")
            .Check("merges_file", FileExists)
            .Default("special_tokens_path", KeyType::String().OrNull(), ConfigNode::Null(),
                     "a tokenizer.json whose added_tokens are the special tokens (null: Qwen2.5's "
                     "22, ids 151643..151664)")
            .Check("special_tokens_path", FileExistsOrNull)
            .Default("truncation_type", KeyType::Enum({"right", "left"}),
                     ConfigNode::String("right"),
                     "right: keep a long sample's first max_seq_len tokens; left: its last "
                     "(the last token becomes EOS either way, as torchtune's truncate)")
            .Default("bos_token", KeyType::String().OrNull(), ConfigNode::Null(),
                     "a special token prepended by add_bos (null: none)")
            .Default("eos_token", KeyType::String(), ConfigNode::String("<|im_end|>"),
                     "the special token that ends samples; generation stops at it and "
                     "<|im_end|>")
            .Default("pad_token", KeyType::String(), ConfigNode::String("<|endoftext|>"),
                     "the padding token")
            .Default("unk_token", KeyType::String().OrNull(), ConfigNode::Null(),
                     "checked to be a special token; never produced (every byte has a token)")
            .Default("errors", KeyType::Enum({"replace"}), ConfigNode::String("replace"),
                     "invalid UTF-8 in decoded text becomes U+FFFD (Python's errors=replace)")
            .Default("bpe_cache_size", KeyType::Int().InRange(0, int64_t{1} << 24),
                     ConfigNode::Int(151646), "merged pieces cached before the cache restarts"),
        [](const ConfigNode& node) -> absl::StatusOr<TokenizerComponent> {
          TokenizerComponent out;
          CCTUNE_RETURN_IF_ERROR(FillCommon(node, &out));
          CCTUNE_ASSIGN_OR_RETURN(out.prompt_format, ParseTemplate(node, PromptFormat::kQwen2_5Chat,
                                                                   {PromptFormat::kQwen2_5Chat}));
          CCTUNE_ASSIGN_OR_RETURN(std::string truncation, node.GetString("truncation_type"));
          out.truncate_left = truncation == "left";
          ByteLevelBpeOptions options = Qwen2_5Options();
          CCTUNE_ASSIGN_OR_RETURN(std::optional<std::string> specials,
                                  node.GetOptionalString("special_tokens_path"));
          if (specials.has_value()) {
            CCTUNE_ASSIGN_OR_RETURN(options.special_tokens, ReadHfSpecialTokens(*specials));
          }
          CCTUNE_ASSIGN_OR_RETURN(std::optional<std::string> bos, node.GetOptionalString("bos_token"));
          CCTUNE_ASSIGN_OR_RETURN(options.eos_token, node.GetString("eos_token"));
          CCTUNE_ASSIGN_OR_RETURN(options.pad_token, node.GetString("pad_token"));
          CCTUNE_ASSIGN_OR_RETURN(std::optional<std::string> unk, node.GetOptionalString("unk_token"));
          options.bos_token = bos.value_or("");
          options.stop_tokens = {options.eos_token, "<|im_end|>"};
          CCTUNE_ASSIGN_OR_RETURN(std::optional<int64_t> cache, node.GetOptionalInt("bpe_cache_size"));
          options.cache_entries = static_cast<size_t>(cache.value_or(151646));
          CCTUNE_ASSIGN_OR_RETURN(std::string path, node.GetString("path"));
          CCTUNE_ASSIGN_OR_RETURN(std::string merges, node.GetString("merges_file"));
          CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<ByteLevelBpeTokenizer> tok,
                                  ByteLevelBpeTokenizer::Load(path, merges, options));
          if (unk.has_value() && !tok->SpecialTokenId(*unk).has_value()) {
            return absl::InvalidArgumentError(
                absl::StrCat("unk_token '", *unk, "' is not one of the special tokens"));
          }
          out.first_special_id = tok->first_special_id();
          out.tokenizer = std::move(tok);
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
