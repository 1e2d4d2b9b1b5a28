#include "data/dataset_components.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "config/key_limits.h"
#include "core/random.h"
#include "core/status.h"
#include "data/packed_dataset.h"
#include "data/sft_dataset.h"
#include "data/text_completion_dataset.h"

namespace cctune {
namespace {

using Result = absl::StatusOr<std::shared_ptr<const Dataset>>;

Schema Common(const std::string& doc, bool split_across_pack) {
  return Schema("", doc)
      .Required("source", KeyType::String(),
                "a local .json / .jsonl file, or 'json' with data_files")
      .Optional("data_files", KeyType::String().OrNull(), "the file when source is 'json'")
      .Default("split", KeyType::String(), ConfigNode::String("train"),
               "train, or a slice of it: train[:90%], train[90%:], train[10:20]")
      .Default("packed", KeyType::Bool(), ConfigNode::Bool(false),
               "pack samples to the tokenizer's max_seq_len")
      .Default("split_across_pack", KeyType::Bool(), ConfigNode::Bool(split_across_pack),
               "when packing, cut a sample at a pack's end instead of moving it");
}

Schema WithMessageKeys(Schema s) {
  return s
      .Default("train_on_input", KeyType::Bool(), ConfigNode::Bool(false),
               "also train on the prompt / user messages")
      .Optional("new_system_prompt", KeyType::String().OrNull(),
                "a system message to put first (replacing any in the data)");
}

absl::StatusOr<std::string> SourcePath(const ConfigNode& node) {
  CCTUNE_ASSIGN_OR_RETURN(std::string source, node.GetString("source"));
  CCTUNE_ASSIGN_OR_RETURN(std::optional<std::string> files, node.GetOptionalString("data_files"));
  if (source == "json") {
    if (!files.has_value()) {
      return absl::InvalidArgumentError("source 'json' needs data_files: the local file");
    }
    return *files;
  }
  if (files.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("data_files is only used with source: json (source is '", source, "')"));
  }
  return source;
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

// split, then packing.
Result Finish(Dataset ds, const ConfigNode& node, const DatasetContext& ctx) {
  CCTUNE_ASSIGN_OR_RETURN(std::string split, node.GetString("split"));
  CCTUNE_ASSIGN_OR_RETURN(ds, SelectSplit(ds, split));
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

Result MakeInstruct(const ConfigNode& node, const DatasetContext& ctx, InstructTemplate t) {
  CCTUNE_RETURN_IF_ERROR(CheckContext(ctx));
  InstructDatasetOptions o;
  CCTUNE_ASSIGN_OR_RETURN(o.source, SourcePath(node));
  o.messages.instruct_template = t;
  CCTUNE_ASSIGN_OR_RETURN(o.messages.column_map, ColumnMap(node));
  CCTUNE_ASSIGN_OR_RETURN(o.messages.train_on_input, node.GetBool("train_on_input"));
  CCTUNE_ASSIGN_OR_RETURN(std::optional<std::string> sys,
                          node.GetOptionalString("new_system_prompt"));
  o.messages.new_system_prompt = sys.value_or("");
  o.max_seq_len = ctx.max_seq_len;
  CCTUNE_ASSIGN_OR_RETURN(Dataset ds, LoadInstructDataset(*ctx.tokenizer, ctx.prompt_format, o));
  return Finish(std::move(ds), node, ctx);
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
    CCTUNE_RETURN_IF_ERROR(r.Register(
        "cctune.datasets.instruct_dataset",
        WithMessageKeys(Common("instruction data: the input column is the user message, the "
                               "output column the answer",
                               false))
            .Optional("column_map", KeyType::Map().OrNull(), "{input: <column>, output: <column>}"),
        [](const ConfigNode& node, const DatasetContext& ctx) {
          return MakeInstruct(node, ctx, InstructTemplate::kInputOutput);
        }));
    CCTUNE_RETURN_IF_ERROR(r.Register(
        "cctune.datasets.alpaca_dataset",
        WithMessageKeys(
            Common("Alpaca-style instruction, input, output with the Alpaca prompt", false))
            .Optional("column_map", KeyType::Map().OrNull(),
                      "{instruction: <column>, input: <column>, output: <column>}"),
        [](const ConfigNode& node, const DatasetContext& ctx) {
          return MakeInstruct(node, ctx, InstructTemplate::kAlpaca);
        }));
    CCTUNE_RETURN_IF_ERROR(r.Register(
        "cctune.datasets.chat_dataset",
        WithMessageKeys(Common("multi-turn conversations", false))
            .Required("conversation_style", KeyType::Enum({"openai", "sharegpt"}),
                      "openai: role/content messages; sharegpt: from/value")
            .Optional("conversation_column", KeyType::String().OrNull(),
                      "the column with the messages (default: messages / conversations)"),
        [](const ConfigNode& node, const DatasetContext& ctx) -> Result {
          CCTUNE_RETURN_IF_ERROR(CheckContext(ctx));
          ChatDatasetOptions o;
          CCTUNE_ASSIGN_OR_RETURN(o.source, SourcePath(node));
          CCTUNE_ASSIGN_OR_RETURN(std::string style, node.GetString("conversation_style"));
          CCTUNE_ASSIGN_OR_RETURN(o.messages.style, ParseConversationStyle(style));
          CCTUNE_ASSIGN_OR_RETURN(std::optional<std::string> column,
                                  node.GetOptionalString("conversation_column"));
          o.messages.conversation_column = column.value_or("");
          CCTUNE_ASSIGN_OR_RETURN(o.messages.train_on_input, node.GetBool("train_on_input"));
          CCTUNE_ASSIGN_OR_RETURN(std::optional<std::string> sys,
                                  node.GetOptionalString("new_system_prompt"));
          o.messages.new_system_prompt = sys.value_or("");
          o.max_seq_len = ctx.max_seq_len;
          CCTUNE_ASSIGN_OR_RETURN(Dataset ds,
                                  LoadChatDataset(*ctx.tokenizer, ctx.prompt_format, o));
          return Finish(std::move(ds), node, ctx);
        }));
    CCTUNE_RETURN_IF_ERROR(r.Register(
        "cctune.datasets.text_completion_dataset",
        Common("plain text, trained on in full", true)
            .Default("column", KeyType::String(), ConfigNode::String("text"),
                     "the column with the text")
            .Default("add_eos", KeyType::Bool(), ConfigNode::Bool(true), "end each text with EOS"),
        [](const ConfigNode& node, const DatasetContext& ctx) -> Result {
          CCTUNE_RETURN_IF_ERROR(CheckContext(ctx));
          TextCompletionDatasetOptions o;
          CCTUNE_ASSIGN_OR_RETURN(o.source, SourcePath(node));
          CCTUNE_ASSIGN_OR_RETURN(o.column, node.GetString("column"));
          CCTUNE_ASSIGN_OR_RETURN(o.add_eos, node.GetBool("add_eos"));
          o.max_seq_len = ctx.max_seq_len;
          CCTUNE_ASSIGN_OR_RETURN(Dataset ds, LoadTextCompletionDataset(*ctx.tokenizer, o));
          return Finish(std::move(ds), node, ctx);
        }));
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
    return absl::OkStatus();
  }();
  return status;
}

}  // namespace cctune
