#include "data/dataset_components.h"

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "config/key_limits.h"
#include "core/random.h"
#include "config/validate.h"
#include "core/status.h"
#include "data/hf_hub.h"
#include "data/packed_dataset.h"
#include "data/sft_dataset.h"
#include "data/text_completion_dataset.h"

namespace cctune {
namespace {

using Result = absl::StatusOr<std::shared_ptr<const Dataset>>;

// What a builder fixes about its source: torchtune's default `source` (nullptr: required),
// the key naming the config (torchtune's wikitext calls it `subset`) and its default.
struct SourceDefaults {
  const char* source = nullptr;
  const char* name_key = "name";
  const char* name = nullptr;
};

Schema Common(const std::string& doc, const SourceDefaults& d, bool split_across_pack) {
  Schema s("", doc);
  const std::string source_doc =
      "a Hugging Face dataset (org/name) in the local hub cache, a local folder, a .json / "
      ".jsonl file, or 'json' with data_files";
  if (d.source == nullptr) {
    s.Required("source", KeyType::String(), source_doc);
  } else {
    s.Default("source", KeyType::String(), ConfigNode::String(d.source), source_doc);
  }
  s.Optional("data_files", KeyType::Any().OrNull(),
             "a file, a list of files (globs allowed; relative to a hub or folder source), or "
             "{split: files}")
      .Default(d.name_key, KeyType::String().OrNull(),
               d.name == nullptr ? ConfigNode::Null() : ConfigNode::String(d.name),
               "the dataset's config: a sub-folder of its snapshot or folder")
      .Optional("data_dir", KeyType::String().OrNull(), "a sub-folder of the snapshot or folder")
      .Optional("revision", KeyType::String().OrNull(),
                "the hub revision (a refs/ name or commit hash; default main)")
      .Default("split", KeyType::String(), ConfigNode::String("train"),
               "a split (train, validation, test), or a slice of it: train[:90%], train[90%:], "
               "train[10:20]")
      .Default("packed", KeyType::Bool(), ConfigNode::Bool(false),
               "pack samples to the tokenizer's max_seq_len")
      .Default("split_across_pack", KeyType::Bool(), ConfigNode::Bool(split_across_pack),
               "when packing, cut a sample at a pack's end instead of moving it")
      .Optional("filter_fn", KeyType::Any().OrNull(),
                "must be null: a Python callable cannot run here (filter the JSONL file)");
  return s;
}

Schema WithMessageKeys(Schema s, bool train_on_input) {
  return s
      .Default("train_on_input", KeyType::Bool(), ConfigNode::Bool(train_on_input),
               "also train on the prompt / user messages")
      .Optional("new_system_prompt", KeyType::String().OrNull(),
                "a system message to put first (replacing any in the data)");
}

absl::StatusOr<std::vector<std::string>> StringList(const ConfigNode& node,
                                                    const std::string& what) {
  if (node.kind() == ConfigNode::Kind::kString) {
    return std::vector<std::string>{node.string_value()};
  }
  std::vector<std::string> out;
  if (node.IsList()) {
    for (const ConfigNode& item : node.items()) {
      if (item.kind() != ConfigNode::Kind::kString) break;
      out.push_back(item.string_value());
    }
    if (out.size() == node.size() && !out.empty()) return out;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      what, " must be a file name or a non-empty list of file names, got ", node.Describe()));
}

// The dataset's files: `source` and the load_dataset keys, resolved (data/hf_hub.h).
absl::StatusOr<ResolvedDataSource> ResolveSource(const ConfigNode& node) {
  DataSourceOptions o;
  CCTUNE_ASSIGN_OR_RETURN(o.source, node.GetString("source"));
  CCTUNE_ASSIGN_OR_RETURN(const std::string split, node.GetString("split"));
  CCTUNE_ASSIGN_OR_RETURN(o.split, SplitName(split));
  const char* name_key = node.Child("subset") != nullptr ? "subset" : "name";
  CCTUNE_ASSIGN_OR_RETURN(std::optional<std::string> name, node.GetOptionalString(name_key));
  o.name = name.value_or("");
  CCTUNE_ASSIGN_OR_RETURN(std::optional<std::string> data_dir, node.GetOptionalString("data_dir"));
  o.data_dir = data_dir.value_or("");
  CCTUNE_ASSIGN_OR_RETURN(std::optional<std::string> revision, node.GetOptionalString("revision"));
  o.revision = revision.value_or("main");
  if (const ConfigNode* f = node.Child("filter_fn"); f != nullptr && !f->IsNull()) {
    return absl::UnimplementedError(
        "filter_fn: a Python callable cannot run here; filter the dataset's JSONL file instead "
        "(or take a slice with split: train[:N])");
  }
  if (const ConfigNode* f = node.Child("data_files"); f != nullptr && !f->IsNull()) {
    if (f->IsMap()) {
      // {split: files}: the split's entry; those files then are that one split.
      const ConfigNode* entry = f->Child(o.split);
      if (entry == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("data_files has no split '", o.split, "'; it has ", f->KeysForMessage()));
      }
      CCTUNE_ASSIGN_OR_RETURN(o.data_files,
                              StringList(*entry, absl::StrCat("data_files['", o.split, "']")));
      o.split = "train";
    } else {
      CCTUNE_ASSIGN_OR_RETURN(o.data_files, StringList(*f, "data_files"));
    }
  }
  return ResolveDataSource(o);
}

absl::StatusOr<std::map<std::string, std::string>> ColumnMap(const ConfigNode& node) {
  std::map<std::string, std::string> out;
  const ConfigNode* cm = node.Child("column_map");
  if (cm == nullptr || cm->IsNull()) return out;
  for (const auto& [key, value] : cm->entries()) {
    if (value.kind() != ConfigNode::Kind::kString) {
      return absl::InvalidArgumentError(
          absl::StrCat("column_map['", key, "'] must be a column name (a string)"));
    }
    out[key] = value.string_value();
  }
  return out;
}

// The split's slice (the resolver chose its files), then packing.
Result Finish(Dataset ds, const ConfigNode& node, const DatasetContext& ctx) {
  CCTUNE_ASSIGN_OR_RETURN(std::string split, node.GetString("split"));
  CCTUNE_ASSIGN_OR_RETURN(ds, SliceSplit(ds, split));
  CCTUNE_ASSIGN_OR_RETURN(bool packed, node.GetBool("packed"));
  if (packed) {
    if (ctx.max_seq_len <= 0) {
      return absl::InvalidArgumentError(
          "packed: true needs the tokenizer's max_seq_len (set tokenizer.max_seq_len)");
    }
    PackOptions po;
    po.max_seq_len = ctx.max_seq_len;
    po.pad_id = ctx.tokenizer->pad_id();
    CCTUNE_ASSIGN_OR_RETURN(po.split_across_pack, node.GetBool("split_across_pack"));
    CCTUNE_ASSIGN_OR_RETURN(ds, PackDataset(ds, po));
  }
  return std::make_shared<const Dataset>(std::move(ds));
}

absl::Status CheckContext(const DatasetContext& ctx) {
  if (ctx.tokenizer == nullptr) return absl::InvalidArgumentError("dataset: no tokenizer");
  return absl::OkStatus();
}

absl::Status PositiveInt(const ConfigNode& node) {
  if (node.kind() == ConfigNode::Kind::kInt && node.int_value() < 1) {
    return absl::InvalidArgumentError(absl::StrCat("must be >= 1, got ", node.int_value()));
  }
  return absl::OkStatus();
}

Result MakeSyntheticArithmetic(const ConfigNode& node, const DatasetContext& ctx) {
  if (ctx.tokenizer == nullptr) {
    return absl::InvalidArgumentError("synthetic_arithmetic needs a tokenizer");
  }
  // One generated split; held-out data is another first_index, not another split name.
  CCTUNE_ASSIGN_OR_RETURN(const std::string split, node.GetString("split"));
  CCTUNE_ASSIGN_OR_RETURN(const std::string split_name, SplitName(split));
  if (split_name != "train") {
    return absl::InvalidArgumentError(absl::StrCat(
        "synthetic_arithmetic has one split, 'train' (or a slice of it), got split '", split,
        "'; a held-out set is another first_index"));
  }
  CCTUNE_ASSIGN_OR_RETURN(int64_t num_samples, node.GetInt("num_samples"));
  CCTUNE_ASSIGN_OR_RETURN(int64_t seed, node.GetInt("seed"));
  CCTUNE_ASSIGN_OR_RETURN(int64_t max_digits, node.GetInt("max_digits"));
  CCTUNE_ASSIGN_OR_RETURN(bool train_on_input, node.GetBool("train_on_input"));
  CCTUNE_ASSIGN_OR_RETURN(int64_t first_index, node.GetInt("first_index"));
  if (max_digits < 1 || max_digits > 9) {
    return absl::InvalidArgumentError(
        absl::StrCat("synthetic_arithmetic: max_digits must be in [1, 9], got ", max_digits));
  }
  std::vector<Sample> samples;
  samples.reserve(num_samples);
  for (int64_t i = 0; i < num_samples; ++i) {
    auto [prompt, answer] =
        SyntheticArithmeticText(static_cast<uint64_t>(seed), first_index + i, max_digits);
    Sample s;
    s.tokens = ctx.tokenizer->Encode(prompt, /*add_bos=*/true, /*add_eos=*/false);
    const size_t prompt_len = s.tokens.size();
    std::vector<int32_t> ans = ctx.tokenizer->Encode(answer, false, /*add_eos=*/true);
    s.tokens.insert(s.tokens.end(), ans.begin(), ans.end());
    if (ctx.max_seq_len > 0 && static_cast<int64_t>(s.tokens.size()) > ctx.max_seq_len) {
      s.tokens.resize(ctx.max_seq_len);
    }
    s.labels = s.tokens;
    if (!train_on_input) {
      for (size_t t = 0; t < prompt_len && t < s.labels.size(); ++t) s.labels[t] = kIgnoreIndex;
    }
    samples.push_back(std::move(s));
  }
  Dataset ds(std::move(samples), false, absl::StrCat("synthetic_arithmetic(seed=", seed, ")"));
  return Finish(std::move(ds), node, ctx);
}

absl::StatusOr<std::string> SystemPrompt(const ConfigNode& node) {
  CCTUNE_ASSIGN_OR_RETURN(std::optional<std::string> sys,
                          node.GetOptionalString("new_system_prompt"));
  return sys.value_or("");
}

using Columns = std::map<std::string, std::string>;

// Instruct data; `default_columns` is the builder's column_map when the config has none.
Result MakeInstruct(const ConfigNode& node, const DatasetContext& ctx, InstructTemplate t,
                    const Columns& default_columns = {}) {
  CCTUNE_RETURN_IF_ERROR(CheckContext(ctx));
  CCTUNE_ASSIGN_OR_RETURN(const ResolvedDataSource src, ResolveSource(node));
  InstructDatasetOptions o;
  o.source = src.description;
  o.files = src.files;
  o.messages.instruct_template = t;
  CCTUNE_ASSIGN_OR_RETURN(o.messages.column_map, ColumnMap(node));
  if (o.messages.column_map.empty()) o.messages.column_map = default_columns;
  CCTUNE_ASSIGN_OR_RETURN(o.messages.train_on_input, node.GetBool("train_on_input"));
  CCTUNE_ASSIGN_OR_RETURN(o.messages.new_system_prompt, SystemPrompt(node));
  o.max_seq_len = ctx.max_seq_len;
  o.truncate_left = ctx.truncate_left;
  CCTUNE_ASSIGN_OR_RETURN(Dataset ds, LoadInstructDataset(*ctx.tokenizer, ctx.prompt_format, o));
  return Finish(std::move(ds), node, ctx);
}

// Conversations; `style` and `column` empty: read from the node's conversation_style and
// conversation_column.
Result MakeChat(const ConfigNode& node, const DatasetContext& ctx,
                std::optional<ConversationStyle> style, std::string column) {
  CCTUNE_RETURN_IF_ERROR(CheckContext(ctx));
  CCTUNE_ASSIGN_OR_RETURN(const ResolvedDataSource src, ResolveSource(node));
  ChatDatasetOptions o;
  o.source = src.description;
  o.files = src.files;
  if (style.has_value()) {
    o.messages.style = *style;
  } else {
    CCTUNE_ASSIGN_OR_RETURN(std::string name, node.GetString("conversation_style"));
    CCTUNE_ASSIGN_OR_RETURN(o.messages.style, ParseConversationStyle(name));
    CCTUNE_ASSIGN_OR_RETURN(std::optional<std::string> c,
                            node.GetOptionalString("conversation_column"));
    column = c.value_or("");
  }
  o.messages.conversation_column = std::move(column);
  CCTUNE_ASSIGN_OR_RETURN(o.messages.train_on_input, node.GetBool("train_on_input"));
  CCTUNE_ASSIGN_OR_RETURN(o.messages.new_system_prompt, SystemPrompt(node));
  o.max_seq_len = ctx.max_seq_len;
  o.truncate_left = ctx.truncate_left;
  CCTUNE_ASSIGN_OR_RETURN(Dataset ds, LoadChatDataset(*ctx.tokenizer, ctx.prompt_format, o));
  return Finish(std::move(ds), node, ctx);
}

// Plain text; `column` empty: the node's column and add_eos keys. A max_seq_len key (the
// corpus builders have one) overrides the tokenizer's for truncation.
Result MakeText(const ConfigNode& node, const DatasetContext& ctx, std::string column) {
  CCTUNE_RETURN_IF_ERROR(CheckContext(ctx));
  CCTUNE_ASSIGN_OR_RETURN(const ResolvedDataSource src, ResolveSource(node));
  TextCompletionDatasetOptions o;
  o.source = src.description;
  o.files = src.files;
  o.max_seq_len = ctx.max_seq_len;
  if (column.empty()) {
    CCTUNE_ASSIGN_OR_RETURN(o.column, node.GetString("column"));
    CCTUNE_ASSIGN_OR_RETURN(o.add_eos, node.GetBool("add_eos"));
  } else {
    o.column = std::move(column);
    CCTUNE_ASSIGN_OR_RETURN(std::optional<int64_t> len, node.GetOptionalInt("max_seq_len"));
    if (len.has_value()) o.max_seq_len = *len;
  }
  CCTUNE_ASSIGN_OR_RETURN(Dataset ds, LoadTextCompletionDataset(*ctx.tokenizer, o));
  return Finish(std::move(ds), node, ctx);
}

Schema InstructSchema(const std::string& doc, const SourceDefaults& d, bool train_on_input,
                      const std::string& columns) {
  return WithMessageKeys(Common(doc, d, false), train_on_input)
      .Optional("column_map", KeyType::Map().OrNull(), columns);
}

Schema CorpusSchema(const std::string& doc, const SourceDefaults& d) {
  return Common(doc, d, true)
      .Optional("max_seq_len", KeyType::Int().AtLeast(1).OrNull(),
                "cut samples to this many tokens (default: the "
                "tokenizer's max_seq_len)");
}

}  // namespace

std::pair<std::string, std::string> SyntheticArithmeticText(uint64_t seed, int64_t index,
                                                            int64_t max_digits) {
  Generator gen(seed);
  gen.SetState(seed, static_cast<uint64_t>(index) * 16);
  uint64_t bound = 1;
  for (int64_t d = 0; d < max_digits; ++d) bound *= 10;
  const uint64_t a = gen.UniformInt(bound);
  const uint64_t b = gen.UniformInt(bound);
  return {absl::StrCat(a, "+", b, "="), absl::StrCat(a + b)};
}

DatasetRegistryT& DatasetRegistry() {
  static DatasetRegistryT* const r = new DatasetRegistryT("dataset");
  return *r;
}

absl::Status RegisterDatasets() {
  static const absl::Status status = [] {
    DatasetRegistryT& r = DatasetRegistry();
    const SourceDefaults required;
    // Generic builders: the source is required.
    CCTUNE_RETURN_IF_ERROR(r.Register(
        "cctune.datasets.instruct_dataset",
        InstructSchema("instruction data: the input column is the user message, the output "
                       "column the answer",
                       required, false, "{input: <column>, output: <column>}"),
        [](const ConfigNode& node, const DatasetContext& ctx) {
          return MakeInstruct(node, ctx, InstructTemplate::kInputOutput);
        }));
    CCTUNE_RETURN_IF_ERROR(r.Register(
        "cctune.datasets.chat_dataset",
        WithMessageKeys(Common("multi-turn conversations", required, false), false)
            .Required("conversation_style", KeyType::Enum({"openai", "sharegpt"}),
                      "openai: role/content messages; sharegpt: from/value")
            .Optional("conversation_column", KeyType::String().OrNull(),
                      "the column with the messages (default: messages / conversations)"),
        [](const ConfigNode& node, const DatasetContext& ctx) {
          return MakeChat(node, ctx, std::nullopt, "");
        }));
    CCTUNE_RETURN_IF_ERROR(r.Register(
        "cctune.datasets.text_completion_dataset",
        Common("plain text, trained on in full", required, true)
            .Default("column", KeyType::String(), ConfigNode::String("text"),
                     "the column with the text")
            .Default("add_eos", KeyType::Bool(), ConfigNode::Bool(true), "end each text with EOS"),
        [](const ConfigNode& node, const DatasetContext& ctx) { return MakeText(node, ctx, ""); }));

    // torchtune's named builders, with its default sources and train_on_input.
    const std::string alpaca_columns = "{instruction: <column>, input: <column>, output: <column>}";
    for (const auto& [name, source] : std::vector<std::pair<std::string, const char*>>{
             {"alpaca_dataset", "tatsu-lab/alpaca"},
             {"alpaca_cleaned_dataset", "yahma/alpaca-cleaned"}}) {
      SourceDefaults d;
      d.source = source;
      CCTUNE_RETURN_IF_ERROR(r.Register(
          absl::StrCat("cctune.datasets.", name),
          InstructSchema("Alpaca-style instruction, input, output with the Alpaca prompt", d, true,
                         alpaca_columns),
          [](const ConfigNode& node, const DatasetContext& ctx) {
            return MakeInstruct(node, ctx, InstructTemplate::kAlpaca);
          }));
    }
    // input -> user, output -> assistant, with the builder's column_map by default.
    struct InputOutputBuilder {
      const char* name;
      const char* source;
      const char* doc;
      Columns columns;
    };
    for (const InputOutputBuilder& b : std::vector<InputOutputBuilder>{
             {"samsum_dataset",
              "Samsung/samsum",
              "dialogue summarization: the dialogue is the user message, the summary the answer",
              {{"input", "dialogue"}, {"output", "summary"}}},
             {"grammar_dataset",
              "liweili/c4_200m",
              "grammar correction: the input text is the user message, the corrected output "
              "the answer",
              {}}}) {
      SourceDefaults d;
      d.source = b.source;
      CCTUNE_RETURN_IF_ERROR(r.Register(
          absl::StrCat("cctune.datasets.", b.name),
          InstructSchema(b.doc, d, false,
                         b.columns.empty()
                             ? "{input: <column>, output: <column>}"
                             : absl::StrCat("{input: <column>, output: <column>} (default {input: ",
                                            b.columns.at("input"),
                                            ", output: ", b.columns.at("output"), "})")),
          [columns = b.columns](const ConfigNode& node, const DatasetContext& ctx) {
            return MakeInstruct(node, ctx, InstructTemplate::kInputOutput, columns);
          }));
    }
    CCTUNE_RETURN_IF_ERROR(r.Register(
        "cctune.data.synthetic_arithmetic",
        Schema("", "\"a+b=c\" samples generated deterministically from a seed")
            .Default("num_samples", KeyType::Int().InRange(1, kMaxNumSamplesKey),
                     ConfigNode::Int(4096), "samples")
            .Check("num_samples", PositiveInt)
            .Default("seed", KeyType::Int(), ConfigNode::Int(0), "generator seed")
            .Default("first_index", KeyType::Int().InRange(0, int64_t{1} << 62), ConfigNode::Int(0),
                     "index of the first sample (a held-out split starts past the training one)")
            .Default("max_digits", KeyType::Int().InRange(1, 9), ConfigNode::Int(2),
                     "digits per operand")
            .Default("train_on_input", KeyType::Bool(), ConfigNode::Bool(false),
                     "also train on the prompt \"a+b=\"")
            .Default("split", KeyType::String(), ConfigNode::String("train"),
                     "train, or a slice of it: train[:90%], train[90%:], train[10:20]")
            .Default("packed", KeyType::Bool(), ConfigNode::Bool(false),
                     "pack samples to the tokenizer's max_seq_len")
            .Default("split_across_pack", KeyType::Bool(), ConfigNode::Bool(false),
                     "when packing, cut a sample at a pack's end instead of moving it"),
        MakeSyntheticArithmetic));
    SourceDefaults slimorca;
    slimorca.source = "Open-Orca/SlimOrca-Dedup";
    CCTUNE_RETURN_IF_ERROR(r.Register(
        "cctune.datasets.slimorca_dataset",
        WithMessageKeys(Common("ShareGPT-style conversations (from/value)", slimorca, false), false)
            .Optional("column_map", KeyType::Map().OrNull(), "{conversations: <column>}"),
        [](const ConfigNode& node, const DatasetContext& ctx) -> Result {
          CCTUNE_ASSIGN_OR_RETURN(Columns cm, ColumnMap(node));
          for (const auto& [key, value] : cm) {
            if (key != "conversations") {
              return absl::InvalidArgumentError(
                  absl::StrCat("column_map key '", key,
                               "' is not used by slimorca_dataset; expected "
                               "conversations"));
            }
          }
          return MakeChat(node, ctx, ConversationStyle::kShareGPT,
                          cm.count("conversations") ? cm["conversations"] : "conversations");
        }));
    // Text corpora: one column, trained on in full; torchtune names each one's config.
    struct CorpusBuilder {
      const char* name;
      const char* source;
      const char* name_key;
      const char* config;
      const char* column;
      const char* doc;
    };
    for (const CorpusBuilder& b : std::vector<CorpusBuilder>{
             {"wikitext_dataset", "EleutherAI/wikitext_document_level", "subset", "wikitext-103-v1",
              "page", "Wikipedia articles (the page column), trained on in full"},
             {"cnn_dailymail_articles_dataset", "ccdv/cnn_dailymail", "name", "3.0.0", "article",
              "news articles (the article column), trained on in full"}}) {
      SourceDefaults d;
      d.source = b.source;
      d.name_key = b.name_key;
      d.name = b.config;
      CCTUNE_RETURN_IF_ERROR(r.Register(
          absl::StrCat("cctune.datasets.", b.name), CorpusSchema(b.doc, d),
          [column = std::string(b.column)](const ConfigNode& node, const DatasetContext& ctx) {
            return MakeText(node, ctx, column);
          }));
    }

    // Preference (chosen / rejected) data feeds DPO and PPO recipes, which cctune lacks:
    // configs naming these validate, and building one says so.
    for (const auto& [name, source] : std::vector<std::pair<std::string, const char*>>{
             {"stack_exchange_paired_dataset", "lvwerra/stack-exchange-paired"},
             {"hh_rlhf_helpful_dataset", "RLHFlow/HH-RLHF-Helpful-standard"},
             {"preference_dataset", nullptr}}) {
      SourceDefaults d;
      d.source = source;
      CCTUNE_RETURN_IF_ERROR(r.Register(
          absl::StrCat("cctune.datasets.", name),
          InstructSchema("preference pairs (prompt, chosen, rejected) for DPO / PPO", d, false,
                         "{prompt: <column>, chosen: <column>, rejected: <column>}"),
          [name = name](const ConfigNode&, const DatasetContext&) -> Result {
            return absl::UnimplementedError(absl::StrCat(
                "torchtune.datasets.", name,
                " is a preference (chosen / rejected) dataset, for DPO and PPO recipes, which "
                "cctune does not have; fine-tune with an instruct or chat dataset"));
          }));
    }
    return absl::OkStatus();
  }();
  return status;
}

absl::StatusOr<std::vector<std::string>> ResolveDatasetFiles(const ConfigNode& node) {
  CCTUNE_RETURN_IF_ERROR(RegisterDatasets());
  const std::optional<ComponentInfo> info = DatasetRegistry().catalog().Find(node.ComponentName());
  if (!info.has_value() || info->kind != "dataset" || info->schema->Find("source") == nullptr) {
    return std::vector<std::string>{};
  }
  CCTUNE_ASSIGN_OR_RETURN(const ResolvedDataSource src,
                          ResolveSource(WithDefaults(node, *info->schema)));
  return src.files;
}

}  // namespace cctune
