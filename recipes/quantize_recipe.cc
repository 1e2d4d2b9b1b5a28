#include "recipes/quantize_recipe.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/safetensors.h"
#include "config/validate.h"
#include "core/device.h"
#include "core/device_interface.h"
#include "core/status.h"
#include "generation/model_loader.h"
#include "models/quantization.h"
#include "models/registry.h"
#include "recipes/config_checks.h"

namespace cctune {

namespace {

namespace fs = std::filesystem;

std::string Describe(const WeightQuantization& q) {
  return q.format == cpu::QuantFormat::kInt4Grouped
             ? absl::StrCat(q.QuantizerName(), " (groupsize ", q.groupsize, ")")
             : q.QuantizerName();
}

std::string Overrides(const WeightQuantization& q) {
  std::string s = absl::StrCat("quantizer._component_=cctune.training.quantization.",
                               q.QuantizerName());
  if (q.format == cpu::QuantFormat::kInt4Grouped) absl::StrAppend(&s, " quantizer.groupsize=", q.groupsize);
  return s;
}

absl::StatusOr<std::optional<WeightQuantization>> ConfigQuantizer(const ConfigNode& root) {
  const ConfigNode* node = root.Find("quantizer");
  if (node == nullptr || node->IsNull()) return std::optional<WeightQuantization>();
  CCTUNE_ASSIGN_OR_RETURN(WeightQuantization q, QuantizerRegistry().Instantiate(*node));
  return std::optional<WeightQuantization>(q);
}

absl::Status CpuOnly(const ConfigNode& node) {
  if (node.kind() == ConfigNode::Kind::kString && node.string_value() != "cpu") {
    return absl::InvalidArgumentError(absl::StrCat(
        "the quantize recipe runs on the CPU (the quantized kernels are CPU kernels), got '",
        node.string_value(), "'"));
  }
  return absl::OkStatus();
}

Schema BuildSchema() {
  return Schema("quantize", "weight-only quantization of a checkpoint (recipes/quantize)")
      .Required("output_dir", KeyType::String(), "where the quantized checkpoint is written")
      .Optional("shared_dir", KeyType::String(),
                "a base folder that other keys refer to as ${shared_dir}")
      .Required("model", KeyType::Component("model"), "model builder (cctune.models.*)")
      .Required("checkpointer", KeyType::Component("checkpointer"),
                "the full-precision checkpoint to quantize")
      .Required("quantizer", KeyType::Component("quantizer"),
                "cctune.training.quantization.Int8WeightOnlyQuantizer or Int4WeightOnlyQuantizer")
      .Default("device", KeyType::String(), ConfigNode::String("cpu"), "cpu (only)")
      .Check("device", CpuOnly)
      .Default("dtype", KeyType::Enum({"fp32", "bf16"}), ConfigNode::String("fp32"),
               "dtype of the tensors left unquantized (embeddings, norms, biases)")
      .Default("seed", KeyType::Int().OrNull(), ConfigNode::Null(),
               "unused (quantization is deterministic); kept for torchtune configs");
}

}  // namespace

absl::StatusOr<std::unique_ptr<TransformerDecoder>> BuildModelStructureForCheckpoint(
    const ConfigNode& root, const LoadedCheckpoint& ckpt) {
  CCTUNE_RETURN_IF_ERROR(RegisterQuantizers());
  CCTUNE_ASSIGN_OR_RETURN(std::optional<WeightQuantization> q, ConfigQuantizer(root));
  const std::string files = absl::StrJoin(ckpt.files, ", ");
  CCTUNE_ASSIGN_OR_RETURN(std::optional<WeightQuantization> stored,
                          QuantizationFromMetadata(ckpt.metadata, files));
  if (stored.has_value() && !q.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the checkpoint ", files, " holds weights quantized by ", Describe(*stored),
        "; set quantizer to the same (", Overrides(*stored), ")"));
  }
  if (stored.has_value() && *stored != *q) {
    return absl::InvalidArgumentError(absl::StrCat(
        "quantizer is ", Describe(*q), " but the checkpoint ", files, " was quantized by ",
        Describe(*stored), "; set ", Overrides(*stored),
        " or point the checkpointer at the full-precision checkpoint"));
  }
  if (!q.has_value()) {
    return ModelComponentRegistry().InstantiateKey(root, "model", ckpt.model_args);
  }
  const ConfigNode* model_node = root.Find("model");
  if (model_node == nullptr) return absl::InvalidArgumentError("missing key 'model'");
  return BuildQuantizedModel(*model_node, ckpt.model_args, *q);
}

absl::Status QuantizeCheckpointForModel(const ConfigNode& root, const TransformerDecoder& model,
                                        LoadedCheckpoint& ckpt) {
  CCTUNE_RETURN_IF_ERROR(RegisterQuantizers());
  CCTUNE_ASSIGN_OR_RETURN(std::optional<WeightQuantization> q, ConfigQuantizer(root));
  if (!q.has_value()) return absl::OkStatus();
  CCTUNE_ASSIGN_OR_RETURN(
      std::optional<WeightQuantization> stored,
      QuantizationFromMetadata(ckpt.metadata, absl::StrJoin(ckpt.files, ", ")));
  if (stored.has_value()) {
    std::fprintf(stderr, "Loading the checkpoint quantized by %s as is.\n", Describe(*q).c_str());
    return absl::OkStatus();
  }
  const auto t0 = std::chrono::steady_clock::now();
  CCTUNE_ASSIGN_OR_RETURN(ckpt.state_dict, QuantizeStateDict(ckpt.state_dict, model, *q));
  std::fprintf(stderr, "Quantized the weights at load with %s in %.02f sec.\n",
               Describe(*q).c_str(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TransformerDecoder>> BuildModelForCheckpoint(const ConfigNode& root,
                                                                           LoadedCheckpoint& ckpt) {
  CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<TransformerDecoder> model,
                          BuildModelStructureForCheckpoint(root, ckpt));
  CCTUNE_RETURN_IF_ERROR(QuantizeCheckpointForModel(root, *model, ckpt));
  return model;
}

const Schema& QuantizeRecipeSchema() {
  static const Schema* const schema = new Schema(BuildSchema());
  return *schema;
}

absl::Status RegisterQuantizeComponents() {
  CCTUNE_RETURN_IF_ERROR(RegisterModelComponents());
  CCTUNE_RETURN_IF_ERROR(RegisterCheckpointers());
  CCTUNE_RETURN_IF_ERROR(RegisterQuantizers());
  return absl::OkStatus();
}

std::vector<ConfigError> ValidateQuantizeConfig(const Config& config) {
  CCTUNE_CHECK_OK(RegisterQuantizeComponents());
  std::vector<ConfigError> errors = Validate(config, QuantizeRecipeSchema());
  Config resolved = config;
  if (!resolved.resolved()) resolved.ResolveCollectingErrors();  // errors already reported
  CheckRecipeCheckpointer(resolved.root(), &errors);
  return errors;
}

absl::Status RunQuantizeRecipe(const Config& config) {
  CCTUNE_RETURN_IF_ERROR(RegisterQuantizeComponents());
  const ConfigNode root = WithDefaults(config.root(), QuantizeRecipeSchema());
  CCTUNE_ASSIGN_OR_RETURN(std::string output_dir, root.GetString("output_dir"));
  CCTUNE_ASSIGN_OR_RETURN(std::string dtype_name, root.GetString("dtype"));
  CCTUNE_ASSIGN_OR_RETURN(DType dtype, RecipeDType(dtype_name));
  CCTUNE_ASSIGN_OR_RETURN(WeightQuantization q, QuantizerRegistry().InstantiateKey(root, "quantizer"));

  CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<Checkpointer> checkpointer,
                          CheckpointerRegistry().InstantiateKey(root, "checkpointer"));
  CCTUNE_ASSIGN_OR_RETURN(LoadedCheckpoint ckpt, checkpointer->LoadCheckpoint());
  const std::string files = absl::StrJoin(ckpt.files, ", ");
  CCTUNE_ASSIGN_OR_RETURN(std::optional<WeightQuantization> stored,
                          QuantizationFromMetadata(ckpt.metadata, files));
  if (stored.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the checkpoint ", files, " is already quantized (", Describe(*stored),
        "); quantize a full-precision checkpoint"));
  }
  const ConfigNode* model_node = root.Find("model");
  CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<TransformerDecoder> model,
                          BuildQuantizedModel(*model_node, ckpt.model_args, q));
  CCTUNE_RETURN_IF_ERROR(CheckModelMatchesCheckpoint(*model, ckpt));

  const auto t0 = std::chrono::steady_clock::now();
  CCTUNE_ASSIGN_OR_RETURN(StateDict quantized, QuantizeStateDict(ckpt.state_dict, *model, q));
  // Loading into the quantized model checks every name and shape and puts the unquantized
  // tensors in `dtype`.
  CCTUNE_ASSIGN_OR_RETURN(ParameterArena arena, LoadWeights(*model, quantized, dtype, Device::Cpu()));
  quantized.clear();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::map<std::string, std::string> metadata = QuantizationMetadata(q);
  metadata["format"] = "pt";  // as torch's save_file writes, for other readers
  for (const auto& [key, value] : ckpt.model_args.entries()) {
    if (value.kind() == ConfigNode::Kind::kInt || value.kind() == ConfigNode::Kind::kString) {
      metadata["model_args." + key] = value.text();
    }
  }
  std::error_code ec;
  fs::create_directories(output_dir, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("output_dir '", output_dir, "' cannot be created: ", ec.message()));
  }
  const std::string stem =
      ckpt.files.empty() ? std::string("model") : fs::path(ckpt.files[0]).stem().string();
  const std::string path =
      (fs::path(output_dir) / absl::StrCat(stem, "-", q.Mode(), ".safetensors")).string();
  const StateDict out = arena.ExportStateDict();
  CCTUNE_RETURN_IF_ERROR(SaveSafetensors(path, out, metadata));
  std::fprintf(stderr, "Time for quantization: %.02f sec\n", seconds);
  std::fprintf(stderr, "Memory used: %.02f GB\n",
               static_cast<double>(GetMemoryStats(Device::Cpu()).peak_bytes) / 1e9);
  std::fprintf(stderr, "Model checkpoint of size %.02f GB saved to %s (%s)\n",
               static_cast<double>(StateDictBytes(out)) / 1e9, path.c_str(), Describe(q).c_str());
  return absl::OkStatus();
}

const RecipeEntry& QuantizeRecipe() {
  static const RecipeEntry* const recipe =
      new RecipeEntry{"quantize",          QuantizeRecipeSchema, RegisterQuantizeComponents,
                      ValidateQuantizeConfig, RunQuantizeRecipe, nullptr};
  return *recipe;
}

}  // namespace cctune
