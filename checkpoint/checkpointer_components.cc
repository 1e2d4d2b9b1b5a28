#include "checkpoint/checkpointer_components.h"

#include <filesystem>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/hf.h"
#include "checkpoint/llama2c.h"
#include "checkpoint/safetensors.h"
#include "core/status.h"
#include "models/llama2c/llama2c.h"

namespace cctune {

namespace {

namespace fs = std::filesystem;

absl::Status DirectoryExists(const ConfigNode& node) {
  if (!node.IsScalar() || node.kind() != ConfigNode::Kind::kString) return absl::OkStatus();
  std::error_code ec;
  if (fs::is_directory(node.string_value(), ec)) return absl::OkStatus();
  return absl::NotFoundError(
      absl::StrCat("checkpoint directory '", node.string_value(), "' does not exist"));
}

// checkpoint_files: a list of file names, or torchtune's {filename_format, max_filename}.
absl::Status FilesShape(const ConfigNode& node) {
  if (node.IsList()) {
    if (node.size() == 0) return absl::InvalidArgumentError("checkpoint_files is empty");
    for (const ConfigNode& item : node.items()) {
      if (item.kind() != ConfigNode::Kind::kString) {
        return absl::InvalidArgumentError(
            absl::StrCat("checkpoint_files items must be file names, got ", item.Describe()));
      }
    }
    return absl::OkStatus();
  }
  if (node.IsMap() && node.Child("filename_format") != nullptr &&
      node.Child("max_filename") != nullptr) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "checkpoint_files must be a list of file names or a map with filename_format and "
      "max_filename, got ",
      node.Describe()));
}

// The file names of checkpoint_files, expanding torchtune's filename_format form
// ("model-{}-of-{}.safetensors" with max_filename "00004").
absl::StatusOr<std::vector<std::string>> FileNames(const ConfigNode& node) {
  CCTUNE_RETURN_IF_ERROR(FilesShape(node));
  std::vector<std::string> names;
  if (node.IsList()) {
    for (const ConfigNode& item : node.items()) names.push_back(item.string_value());
    return names;
  }
  CCTUNE_ASSIGN_OR_RETURN(std::string format, node.GetString("filename_format"));
  CCTUNE_ASSIGN_OR_RETURN(std::string max_text, node.GetString("max_filename"));
  int max = 0;
  if (!absl::SimpleAtoi(max_text, &max) || max < 1 || absl::StrContains(format, "{}") == false) {
    return node.Error(absl::StrCat("checkpoint_files: cannot expand filename_format '", format,
                                   "' with max_filename '", max_text, "'"));
  }
  for (int i = 1; i <= max; ++i) {
    std::string index = absl::StrCat(i);
    index = std::string(max_text.size() > index.size() ? max_text.size() - index.size() : 0, '0') +
            index;
    std::string name = format;
    const size_t a = name.find("{}");
    name.replace(a, 2, index);
    const size_t b = name.find("{}");
    if (b != std::string::npos) name.replace(b, 2, max_text);
    names.push_back(name);
  }
  return names;
}

// The full paths of the files, each of which must exist.
absl::StatusOr<std::vector<std::string>> ExistingFiles(const ConfigNode& node) {
  CCTUNE_ASSIGN_OR_RETURN(std::string dir, node.GetString("checkpoint_dir"));
  CCTUNE_ASSIGN_OR_RETURN(const ConfigNode* files_node, node.Get("checkpoint_files"));
  CCTUNE_ASSIGN_OR_RETURN(std::vector<std::string> names, FileNames(*files_node));
  std::vector<std::string> paths;
  for (const std::string& name : names) {
    const std::string path = (fs::path(dir) / name).string();
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) {
      return files_node->Error(absl::StrCat("checkpoint file '", path, "' does not exist"));
    }
    paths.push_back(path);
  }
  return paths;
}

Schema CommonSchema(std::string doc) {
  return Schema("", std::move(doc))
      .Required("checkpoint_dir", KeyType::String(), "directory holding the checkpoint files")
      .Check("checkpoint_dir", DirectoryExists)
      .Required("checkpoint_files", KeyType::Any(),
                "file names inside checkpoint_dir (a list, or {filename_format, max_filename})")
      .Check("checkpoint_files", FilesShape)
      .Optional("output_dir", KeyType::String().OrNull(),
                "null or the recipe's output_dir (where the recipes save; ${output_dir})")
      .Optional("adapter_checkpoint", KeyType::String().OrNull(),
                "unsupported; must be null (a LoRA run resumes with the recipe's "
                "resume_from_checkpoint)")
      .Optional("recipe_checkpoint", KeyType::String().OrNull(),
                "unsupported; must be null (the recipe's resume_from_checkpoint reads LATEST)")
      .Default("resume_from_checkpoint", KeyType::Bool(), ConfigNode::Bool(false),
               "unsupported; must be false (use the recipe's resume_from_checkpoint)")
      .Optional("keep_last_n_checkpoints", KeyType::Int().InRange(1, int64_t{1} << 40).OrNull(),
                "the recipe keeps the newest N step_* checkpoints (LATEST's always) and "
                "removes older ones after each save; null: keep all (torchtune's default)")
      .Default("safe_serialization", KeyType::Bool(), ConfigNode::Bool(true),
               "must be true: checkpoints are always safetensors")
      .Optional("should_load_recipe_state", KeyType::Bool(),
                "unsupported; must be false (use the recipe's resume_from_checkpoint)");
}

// The keys whose torchtune behaviour is not implemented: Unimplemented naming the key and
// value when a config asks for it.
absl::Status RejectUnsupported(const ConfigNode& node) {
  CCTUNE_ASSIGN_OR_RETURN(bool resume, node.GetBool("resume_from_checkpoint"));
  if (resume) {
    return absl::UnimplementedError(
        "checkpointer.resume_from_checkpoint: true is not supported; set the recipe's "
        "top-level resume_from_checkpoint: true");
  }
  for (const char* key : {"adapter_checkpoint", "recipe_checkpoint"}) {
    CCTUNE_ASSIGN_OR_RETURN(std::optional<std::string> path, node.GetOptionalString(key));
    if (path.has_value()) {
      return absl::UnimplementedError(absl::StrCat(
          "checkpointer.", key, ": '", *path,
          "' is not supported (must be null); the recipe's resume_from_checkpoint restores "
          "from <output_dir>/LATEST"));
    }
  }
  CCTUNE_ASSIGN_OR_RETURN(bool safetensors, node.GetBool("safe_serialization"));
  if (!safetensors) {
    return absl::UnimplementedError(
        "checkpointer.safe_serialization: false is not supported; checkpoints are always "
        "written as safetensors");
  }
  CCTUNE_ASSIGN_OR_RETURN(std::optional<bool> load_state,
                          node.GetOptionalBool("should_load_recipe_state"));
  if (load_state.value_or(false)) {
    return absl::UnimplementedError(
        "checkpointer.should_load_recipe_state: true is not supported; set the recipe's "
        "top-level resume_from_checkpoint: true");
  }
  return absl::OkStatus();
}

// torchtune's ModelType values this loader understands, and whether q/k need the HF -> Meta
// (interleaved RoPE) permutation.
const std::set<std::string>& HfModelTypes() {
  static const auto* types =
      new std::set<std::string>{"LLAMA2", "LLAMA3", "LLAMA3_2", "MISTRAL", "QWEN2", "LLAMA2C"};
  return *types;
}

class HfCheckpointer final : public Checkpointer {
 public:
  HfCheckpointer(std::string dir, std::vector<std::string> files, std::string model_type)
      : dir_(std::move(dir)), files_(std::move(files)), model_type_(std::move(model_type)) {}

  absl::StatusOr<LoadedCheckpoint> Load(const CheckpointLoadOptions& load) override {
    HfLoadOptions options;
    const bool permute = model_type_ != "QWEN2";  // torchtune's Qwen2 rotates half-split
    options.permute_qk = permute && !load.keep_qk_layout;
    options.alias_tied_output = true;
    CCTUNE_ASSIGN_OR_RETURN(HfCheckpoint ck, LoadHfCheckpoint(dir_, options));
    // Every configured file must be one the checkpoint is made of.
    std::set<std::string> read;
    for (const std::string& f : ck.files) read.insert(fs::path(f).filename().string());
    for (const std::string& f : files_) {
      if (read.count(fs::path(f).filename().string()) == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("checkpoint_files lists '", f, "', but the checkpoint in ", dir_,
                         " consists of: ", absl::StrJoin(read, ", ")));
      }
    }
    LoadedCheckpoint out;
    out.state_dict = std::move(ck.state_dict);
    out.files = std::move(ck.files);
    out.model_args.Set("checkpoint_dir", ConfigNode::String(dir_));
    out.model_args.Set("checkpoint_model_type", ConfigNode::String(model_type_));
    out.qk_half_split = permute && !options.permute_qk;
    const HfModelConfig& c = ck.config;
    out.sizes.source = (fs::path(dir_) / "config.json").string();
    out.sizes.vocab_size = c.vocab_size;
    out.sizes.embed_dim = c.hidden_size;
    out.sizes.num_layers = c.num_hidden_layers;
    out.sizes.num_heads = c.num_attention_heads;
    out.sizes.num_kv_heads = c.num_key_value_heads > 0 ? c.num_key_value_heads
                                                       : c.num_attention_heads;
    out.sizes.head_dim = c.head_dim > 0 ? c.head_dim
                         : c.num_attention_heads > 0 ? c.hidden_size / c.num_attention_heads
                                                     : 0;
    return out;
  }

 private:
  std::string dir_;
  std::vector<std::string> files_;
  std::string model_type_;
};

class Llama2cCheckpointer final : public Checkpointer {
 public:
  explicit Llama2cCheckpointer(std::string path) : path_(std::move(path)) {}

  // llama2.c files hold q/k in the interleaved order already: nothing to keep or permute.
  absl::StatusOr<LoadedCheckpoint> Load(const CheckpointLoadOptions&) override {
    CCTUNE_ASSIGN_OR_RETURN(Llama2cCheckpoint ck, LoadLlama2c(path_));
    const Llama2cHeader& c = ck.config;
    LoadedCheckpoint out;
    out.state_dict = std::move(ck.state_dict);
    out.model_args = Llama2cBuilderArgs(c);
    out.files = {path_};
    out.sizes.source = absl::StrCat("the llama2.c header of ", path_);
    out.sizes.vocab_size = c.vocab_size;
    out.sizes.embed_dim = c.dim;
    out.sizes.num_layers = c.n_layers;
    out.sizes.num_heads = c.n_heads;
    out.sizes.num_kv_heads = c.n_kv_heads;
    out.sizes.head_dim = c.n_heads > 0 ? c.dim / c.n_heads : 0;
    return out;
  }

 private:
  std::string path_;
};

// Safetensors files in torchtune names (no conversion). Metadata keys "model_args.<key>" give
// the model-builder arguments the checkpoint fixes (an integer when the value is one).
class TorchTuneCheckpointer final : public Checkpointer {
 public:
  explicit TorchTuneCheckpointer(std::vector<std::string> files) : files_(std::move(files)) {}

  // No q/k permutation in torchtune names, so the load options change nothing.
  absl::StatusOr<LoadedCheckpoint> Load(const CheckpointLoadOptions&) override {
    LoadedCheckpoint out;
    for (const std::string& path : files_) {
      CCTUNE_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(path));
      CCTUNE_ASSIGN_OR_RETURN(StateDict sd, file.LoadAll());
      for (auto& [name, t] : sd) {
        if (!out.state_dict.emplace(name, std::move(t)).second) {
          return absl::InvalidArgumentError(
              absl::StrCat("tensor ", name, " is in more than one checkpoint file (", path, ")"));
        }
      }
      for (const auto& [key, value] : file.metadata()) {
        auto [it, inserted] = out.metadata.emplace(key, value);
        if (!inserted && it->second != value) {
          return absl::InvalidArgumentError(absl::StrCat(
              path, ": metadata ", key, " '", value, "' differs from the other files' '",
              it->second, "'"));
        }
      }
      out.files.push_back(path);
    }
    for (const auto& [key, value] : out.metadata) {
      if (!absl::StartsWith(key, "model_args.")) continue;
      int64_t v;
      out.model_args.Set(key.substr(11), absl::SimpleAtoi(value, &v) ? ConfigNode::Int(v)
                                                                    : ConfigNode::String(value));
    }
    return out;
  }

 private:
  std::vector<std::string> files_;
};

}  // namespace

void CheckCheckpointFilesExist(const ConfigNode& checkpointer, std::vector<ConfigError>* errors) {
  const ConfigNode* dir = checkpointer.Find("checkpoint_dir");
  const ConfigNode* files = checkpointer.Find("checkpoint_files");
  if (dir == nullptr || files == nullptr || dir->kind() != ConfigNode::Kind::kString) return;
  std::error_code ec;
  if (!fs::is_directory(dir->string_value(), ec)) return;  // reported by the schema check
  absl::StatusOr<std::vector<std::string>> names = FileNames(*files);
  if (!names.ok()) return;  // reported by the schema check
  for (size_t i = 0; i < names->size(); ++i) {
    const std::string path = (fs::path(dir->string_value()) / (*names)[i]).string();
    if (fs::is_regular_file(path, ec)) continue;
    const ConfigNode& where = files->IsList() ? files->items()[i] : *files;
    errors->push_back(where.MakeError(absl::StrCat("checkpoint file '", path, "' does not exist")));
  }
}

void CheckCheckpointerOutputDir(const ConfigNode& root, std::vector<ConfigError>* errors) {
  const ConfigNode* ck = root.Find("checkpointer");
  const ConfigNode* top = root.Find("output_dir");
  if (ck == nullptr || !ck->IsMap() || top == nullptr) return;
  const ConfigNode* dir = ck->Find("output_dir");
  if (dir == nullptr || dir->kind() != ConfigNode::Kind::kString ||
      top->kind() != ConfigNode::Kind::kString) {
    return;  // null, absent, or a type error the schema reports
  }
  auto normal = [](const std::string& p) {
    std::string s = fs::path(p).lexically_normal().string();
    while (s.size() > 1 && s.back() == '/') s.pop_back();
    return s;
  };
  if (normal(dir->string_value()) == normal(top->string_value())) return;
  errors->push_back(dir->MakeError(absl::StrCat(
      "checkpointer.output_dir '", dir->string_value(), "' differs from output_dir '",
      top->string_value(), "', where the recipe saves its checkpoints; set it to "
      "${output_dir} or remove it")));
}

void CheckRecipeCheckpointer(const ConfigNode& root, std::vector<ConfigError>* errors) {
  if (const ConfigNode* ck = root.Find("checkpointer"); ck != nullptr && ck->IsMap()) {
    CheckCheckpointFilesExist(*ck, errors);
  }
  CheckCheckpointerOutputDir(root, errors);
}

absl::Status CheckModelMatchesCheckpoint(const TransformerDecoder& model,
                                         const LoadedCheckpoint& checkpoint) {
  const CheckpointModelSizes& c = checkpoint.sizes;
  if (model.num_layers() == 0) return absl::OkStatus();
  const auto& attn = model.layer(0).attn();
  struct Pair {
    const char* name;  // as config.json / torchtune name it
    int64_t stated;
    int64_t built;
  };
  const Pair pairs[] = {
      {"vocab_size", c.vocab_size, model.vocab_size()},
      {"embed_dim (hidden_size)", c.embed_dim, model.embed_dim()},
      {"num_layers (num_hidden_layers)", c.num_layers, static_cast<int64_t>(model.num_layers())},
      {"num_heads (num_attention_heads)", c.num_heads, attn.num_heads()},
      {"num_kv_heads (num_key_value_heads)", c.num_kv_heads, attn.num_kv_heads()},
      {"head_dim", c.head_dim, attn.head_dim()},
  };
  std::vector<std::string> problems;
  for (const Pair& p : pairs) {
    if (p.stated <= 0 || p.stated == p.built) continue;
    problems.push_back(
        absl::StrCat(p.name, ": ", p.stated, " in the checkpoint, ", p.built, " in the model"));
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "the model built from the config does not match the checkpoint (", c.source, "): ",
      absl::StrJoin(problems, "; "),
      ". Weights of the same shapes would load and give wrong text; fix the model keys or use "
      "the matching checkpoint"));
}

CheckpointerRegistryT& CheckpointerRegistry() {
  static CheckpointerRegistryT* const r = new CheckpointerRegistryT("checkpointer");
  return *r;
}

absl::Status RegisterCheckpointers() {
  static const absl::Status status = [] {
    CheckpointerRegistryT& r = CheckpointerRegistry();
    std::vector<std::string> types(HfModelTypes().begin(), HfModelTypes().end());
    CCTUNE_RETURN_IF_ERROR(r.Register(
        "cctune.training.FullModelHFCheckpointer",
        CommonSchema("a Hugging Face checkpoint: config.json + safetensors (sharded or not)")
            .Required("model_type", KeyType::Enum(types), "torchtune ModelType"),
        [](const ConfigNode& node) -> absl::StatusOr<std::unique_ptr<Checkpointer>> {
          CCTUNE_RETURN_IF_ERROR(RejectUnsupported(node));
          CCTUNE_ASSIGN_OR_RETURN(std::vector<std::string> files, ExistingFiles(node));
          for (const std::string& f : files) {
            if (!absl::EndsWith(f, ".safetensors")) {
              return absl::InvalidArgumentError(absl::StrCat(
                  "checkpoint file '", f,
                  "' is not a .safetensors file; only safetensors checkpoints are supported "
                  "(convert PyTorch .bin/.pt files with transformers' save_pretrained)"));
            }
          }
          CCTUNE_ASSIGN_OR_RETURN(std::string dir, node.GetString("checkpoint_dir"));
          CCTUNE_ASSIGN_OR_RETURN(std::string type, node.GetString("model_type"));
          return std::unique_ptr<Checkpointer>(
              new HfCheckpointer(std::move(dir), std::move(files), std::move(type)));
        }));
    CCTUNE_RETURN_IF_ERROR(r.AddAlias("torchtune.utils.FullModelHFCheckpointer",
                                      "cctune.training.FullModelHFCheckpointer"));
    CCTUNE_RETURN_IF_ERROR(r.Register(
        "cctune.training.Llama2cCheckpointer",
        CommonSchema("a llama2.c checkpoint: one .bin file (7-int header, then f32 weights)")
            .Optional("model_type", KeyType::Enum({"LLAMA2C"}),
                      "LLAMA2C when given (the .bin header fixes the architecture)"),
        [](const ConfigNode& node) -> absl::StatusOr<std::unique_ptr<Checkpointer>> {
          CCTUNE_RETURN_IF_ERROR(RejectUnsupported(node));
          CCTUNE_ASSIGN_OR_RETURN(std::vector<std::string> files, ExistingFiles(node));
          if (files.size() != 1) {
            return absl::InvalidArgumentError(absl::StrCat(
                "a llama2.c checkpoint is one .bin file; checkpoint_files names ", files.size()));
          }
          return std::unique_ptr<Checkpointer>(new Llama2cCheckpointer(files[0]));
        }));
    CCTUNE_RETURN_IF_ERROR(r.Register(
        "cctune.training.FullModelTorchTuneCheckpointer",
        CommonSchema("safetensors files in torchtune names (e.g. the quantize recipe's output)")
            .Optional("model_type", KeyType::String(), "torchtune ModelType (informational)"),
        [](const ConfigNode& node) -> absl::StatusOr<std::unique_ptr<Checkpointer>> {
          CCTUNE_RETURN_IF_ERROR(RejectUnsupported(node));
          CCTUNE_ASSIGN_OR_RETURN(std::vector<std::string> files, ExistingFiles(node));
          for (const std::string& f : files) {
            if (!absl::EndsWith(f, ".safetensors")) {
              return absl::InvalidArgumentError(absl::StrCat(
                  "checkpoint file '", f, "' is not a .safetensors file (the quantize recipe "
                  "writes <name>-<mode>.safetensors)"));
            }
          }
          return std::unique_ptr<Checkpointer>(new TorchTuneCheckpointer(std::move(files)));
        }));
    CCTUNE_RETURN_IF_ERROR(r.AddAlias("torchtune.utils.FullModelTorchTuneCheckpointer",
                                      "cctune.training.FullModelTorchTuneCheckpointer"));
    return absl::OkStatus();
  }();
  return status;
}

}  // namespace cctune
