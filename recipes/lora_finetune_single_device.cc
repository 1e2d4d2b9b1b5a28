#include "recipes/lora_finetune_single_device.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "checkpoint/atomic_file.h"
#include "checkpoint/hf.h"
#include "checkpoint/peft.h"
#include "config/validate.h"
#include "core/device.h"
#include "core/device_interface.h"
#include "core/random.h"
#include "core/status.h"
#include "data/collate.h"
#include "data/data_loader.h"
#include "data/dataset_components.h"
#include "models/lora.h"
#include "models/registry.h"
#include "models/decoder_builder.h"
#include "modules/decoder_backward.h"
#include "modules/parameters.h"
#include "recipes/builtin_configs.h"
#include "recipes/config_checks.h"
#include "recipes/finetune_utils.h"
#include "recipes/checkpointer_components.h"
#include "recipes/model_components.h"
#include "recipes/tokenizer_components.h"
#include "recipes/training_components.h"
#include "training/metric_logger_components.h"
#include "training/progress_bar.h"
#include "training/recipe_state.h"
#include "training/train_step.h"

namespace cctune {

namespace {

namespace fs = std::filesystem;

constexpr char kLatestFile[] = "LATEST";
constexpr char kRecipeStateFile[] = "recipe_state.safetensors";

Schema BuildSchema() {
  return Schema("lora_finetune_single_device",
                "LoRA fine-tune on one device (recipes/lora_finetune_single_device)")
      .Required("output_dir", KeyType::String(), "checkpoints (step_<N>/: adapter, merged weights, state; LATEST) and logs")
      .Optional("shared_dir", KeyType::String(), "a base folder other keys refer to")
      .Required("model", KeyType::Component("model"), "LoRA model builder (torchtune.models.*.lora_*)")
      .Required("tokenizer", KeyType::Component("tokenizer"), "tokenizer")
      .Default("checkpointer", KeyType::Component("checkpointer").OrNull(), ConfigNode::Null(),
               "base weights (HF or llama2.c); null: random init from seed")
      .Required("dataset", KeyType::Component("dataset"), "training dataset")
      .Default("validation_dataset", KeyType::Component("dataset").OrNull(), ConfigNode::Null(),
               "held-out dataset for the validation loss (null: none)")
      .Default("eval_every_n_steps", KeyType::Int(), ConfigNode::Int(0),
               "validation loss every N steps (0: only at epoch ends when configured)")
      .Default("seed", KeyType::Int(), ConfigNode::Int(0), "init, shuffling and RNG seed")
      .Default("shuffle", KeyType::Bool(), ConfigNode::Bool(true), "shuffle every epoch")
      .Default("batch_size", KeyType::Int(), ConfigNode::Int(2), "samples per micro-batch")
      .Check("batch_size", AtLeastOne)
      .Default("epochs", KeyType::Int(), ConfigNode::Int(1), "passes over the dataset")
      .Check("epochs", AtLeastOne)
      .Default("max_steps_per_epoch", KeyType::Int().OrNull(), ConfigNode::Null(),
               "cap on optimizer steps per epoch (null: the whole epoch)")
      .Check("max_steps_per_epoch", AtLeastOne)
      .Default("gradient_accumulation_steps", KeyType::Int(), ConfigNode::Int(1),
               "micro-batches per optimizer step")
      .Check("gradient_accumulation_steps", AtLeastOne)
      .Default("clip_grad_norm", KeyType::Float().OrNull(), ConfigNode::Null(),
               "global L2 norm clipping (null: none; the norm is still logged)")
      .Required("optimizer", KeyType::Component("optimizer"), "torch.optim.AdamW / SGD")
      .Default("lr_scheduler", KeyType::Component("lr_scheduler").OrNull(), ConfigNode::Null(),
               "learning-rate schedule (null: constant)")
      .Default("loss", KeyType::Component("loss").OrNull(), ConfigNode::Null(),
               "torchtune.modules.loss.CEWithChunkedOutputLoss (the only loss)")
      .Default("enable_activation_checkpointing", KeyType::Bool(), ConfigNode::Bool(false),
               "recompute each layer's forward in the backward")
      .Default("enable_activation_offloading", KeyType::Bool(), ConfigNode::Bool(false),
               "accepted for torchtune configs; ignored (activations stay on the device)")
      .Default("compile", KeyType::Bool(), ConfigNode::Bool(false), "accepted; ignored")
      .Default("optimizer_in_bwd", KeyType::Bool(), ConfigNode::Bool(false), "must be false")
      .Default("dtype", KeyType::Enum({"fp32", "bf16"}), ConfigNode::String("fp32"),
               "parameter dtype (bf16 keeps f32 master copies in the optimizer)")
      .Default("device", KeyType::String(), ConfigNode::String("cpu"),
               "cpu, cuda or cuda:N (weights, gradients and optimizer state on it)")
      .Check("device", TrainingDeviceName)
      .Default("metric_logger", KeyType::Component("metric_logger").OrNull(), ConfigNode::Null(),
               "where metrics go (null: stdout)")
      .Default("log_every_n_steps", KeyType::Int(), ConfigNode::Int(1), "log period in steps")
      .Check("log_every_n_steps", AtLeastOne)
      .Default("log_peak_memory_stats", KeyType::Bool(), ConfigNode::Bool(true),
               "log peak_memory_gb")
      .Default("save_every_n_steps", KeyType::Int().OrNull(), ConfigNode::Null(),
               "checkpoint period in steps (null: epoch ends only)")
      .Check("save_every_n_steps", AtLeastOne)
      .Default("resume_from_checkpoint", KeyType::Bool(), ConfigNode::Bool(false),
               "continue from <output_dir>/LATEST bit-identically")
      .Default("stop_after_steps", KeyType::Int().OrNull(), ConfigNode::Null(),
               "end the run (with a checkpoint) after this many steps in total, as a "
               "preemption would; the schedule is unchanged (null: run to the end)")
      .Check("stop_after_steps", AtLeastOne);
}

struct Run {
  std::unique_ptr<TransformerDecoder> model;
  ParameterArena params;
  ParameterArena grads;
  std::unique_ptr<DecoderTrainer> trainer;
  std::unique_ptr<Optimizer> optimizer;
  std::optional<CosineScheduleWithWarmup> schedule;
  double base_lr = 0;
  HfModelConfig hf_config;
  DType dtype = DType::kF32;
  PeftAdapterConfig adapter_config;
};

// The LoRA hyper-parameters the model node sets (the builders' defaults otherwise).
absl::StatusOr<PeftAdapterConfig> AdapterConfigFromModelNode(const ConfigNode& model) {
  PeftAdapterConfig c;
  if (const ConfigNode* r = model.Find("lora_rank"); r != nullptr && !r->IsNull()) {
    if (r->kind() != ConfigNode::Kind::kInt) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.lora_rank must be an integer, got ", r->Describe()));
    }
    c.r = r->int_value();
  }
  if (const ConfigNode* a = model.Find("lora_alpha"); a != nullptr && !a->IsNull()) {
    if (a->kind() == ConfigNode::Kind::kInt) {
      c.lora_alpha = static_cast<double>(a->int_value());
    } else if (a->kind() == ConfigNode::Kind::kFloat) {
      c.lora_alpha = a->float_value();
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("model.lora_alpha must be a number, got ", a->Describe()));
    }
  }
  if (const ConfigNode* d = model.Find("lora_dropout"); d != nullptr && !d->IsNull()) {
    double v = 0;
    if (d->kind() == ConfigNode::Kind::kInt) {
      v = static_cast<double>(d->int_value());
    } else if (d->kind() == ConfigNode::Kind::kFloat) {
      v = d->float_value();
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("model.lora_dropout must be a number, got ", d->Describe()));
    }
    if (!(v >= 0.0 && v < 1.0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.lora_dropout must be in [0, 1), got ", v));
    }
    c.lora_dropout = v;
  }
  if (c.r < 1) {
    return absl::InvalidArgumentError(absl::StrCat("model.lora_rank must be >= 1, got ", c.r));
  }
  return c;
}

// The merged model's weights in torchtune names: every adapted W becomes
// W + alpha/rank * B.A (fp64 accumulation, stored in W's dtype); adapters are left out.
// `state_dict` (views of the training arena) is not modified.
absl::StatusOr<StateDict> MergedStateDict(const StateDict& state_dict, double scale) {
  StateDict merged = BaseStateDict(state_dict);
  constexpr absl::string_view kA = ".lora_a.weight";
  for (const auto& [name, a_view] : state_dict) {
    if (!absl::EndsWith(name, kA)) continue;
    const std::string prefix = name.substr(0, name.size() - kA.size());
    auto b_it = state_dict.find(prefix + ".lora_b.weight");
    auto w_it = merged.find(prefix + ".weight");
    if (b_it == state_dict.end() || w_it == merged.end()) {
      return absl::NotFoundError(
          absl::StrCat("merge: adapter ", name, " has no lora_b or base weight ", prefix,
                       ".weight"));
    }
    // Merged on the host (the arena may be on a GPU; no copy when it is on the CPU).
    CCTUNE_ASSIGN_OR_RETURN(Tensor a, a_view.To(Device::Cpu()));
    CCTUNE_ASSIGN_OR_RETURN(a, a.To(DType::kF32));
    CCTUNE_ASSIGN_OR_RETURN(a, a.Contiguous());
    CCTUNE_ASSIGN_OR_RETURN(Tensor b, b_it->second.To(Device::Cpu()));
    CCTUNE_ASSIGN_OR_RETURN(b, b.To(DType::kF32));
    CCTUNE_ASSIGN_OR_RETURN(b, b.Contiguous());
    const Tensor& w_view = w_it->second;
    CCTUNE_ASSIGN_OR_RETURN(Tensor w, w_view.To(Device::Cpu()));
    CCTUNE_ASSIGN_OR_RETURN(w, w.To(DType::kF32));
    CCTUNE_ASSIGN_OR_RETURN(w, w.Clone());
    const int64_t rank = a.shape()[0], in = a.shape()[1], out = b.shape()[0];
    if (b.shape()[1] != rank || w.shape()[0] != out || w.shape()[1] != in) {
      return absl::InvalidArgumentError(absl::StrCat("merge: shapes of ", prefix,
                                                     " do not match (weight, lora_a, lora_b)"));
    }
    const float* pa = a.data<float>();
    const float* pb = b.data<float>();
    float* pw = w.data<float>();
#pragma omp parallel for
    for (int64_t o = 0; o < out; ++o) {
      for (int64_t i = 0; i < in; ++i) {
        double acc = 0;
        for (int64_t r = 0; r < rank; ++r) {
          acc += static_cast<double>(pb[o * rank + r]) * pa[r * in + i];
        }
        pw[o * in + i] = static_cast<float>(pw[o * in + i] + scale * acc);
      }
    }
    CCTUNE_ASSIGN_OR_RETURN(Tensor stored, w.To(w_view.dtype()));
    w_it->second = stored;
  }
  return merged;
}

// Writes <output_dir>/step_<step>/ then points LATEST at it; removes older step_ dirs.
absl::Status SaveCheckpoint(const std::string& output_dir, const Run& run, RecipeState state) {
  const std::string name = absl::StrCat("step_", state.proto.step());
  const std::string dir = absl::StrCat(output_dir, "/", name);
  const StateDict state_dict = run.params.ExportStateDict();
  CCTUNE_RETURN_IF_ERROR(SavePeftAdapter(dir, state_dict, run.adapter_config, run.hf_config));
  CCTUNE_ASSIGN_OR_RETURN(
      StateDict merged,
      MergedStateDict(state_dict, run.adapter_config.lora_alpha /
                                      static_cast<double>(run.adapter_config.r)));
  HfSaveOptions save_options;
  CCTUNE_RETURN_IF_ERROR(SaveHfCheckpoint(dir, merged, run.hf_config, save_options));
  SetOptimizerState(run.optimizer->ExportState(), &state);
  CCTUNE_RETURN_IF_ERROR(SaveRecipeState(absl::StrCat(dir, "/", kRecipeStateFile), state));
  CCTUNE_RETURN_IF_ERROR(
      WriteFileAtomically(absl::StrCat(output_dir, "/", kLatestFile), name + "\n"));
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(output_dir, ec)) {
    const std::string other = entry.path().filename().string();
    if (entry.is_directory() && absl::StartsWith(other, "step_") && other != name) {
      fs::remove_all(entry.path(), ec);
    }
  }
  std::fprintf(stderr, "Saved checkpoint %s\n", dir.c_str());
  return absl::OkStatus();
}

// A builder argument as text ("32", "true"; a list as "q_proj,v_proj").
std::string LoRAArgText(const ConfigNode& node) {
  switch (node.kind()) {
    case ConfigNode::Kind::kString:
      return node.string_value();
    case ConfigNode::Kind::kBool:
      return node.bool_value() ? "true" : "false";
    case ConfigNode::Kind::kInt:
      return absl::StrCat(node.int_value());
    case ConfigNode::Kind::kFloat:
      return node.text().empty() ? absl::StrCat(node.float_value()) : node.text();
    case ConfigNode::Kind::kList: {
      std::string out;
      for (const ConfigNode& item : node.items()) {
        if (!out.empty()) out += ",";
        out += LoRAArgText(item);
      }
      return out;
    }
    default:
      return node.text();
  }
}

absl::StatusOr<LoRAOptions> ParseTinyLoRAArgs(const ModelArgs& args, absl::string_view builder) {
  LoRAOptions o;
  if (auto it = args.find("lora_attn_modules"); it != args.end()) {
    o.lora_attn_modules.clear();
    for (absl::string_view part :
         absl::StrSplit(it->second, absl::ByAnyChar(",[] '\""), absl::SkipEmpty())) {
      o.lora_attn_modules.emplace_back(part);
    }
  }
  CCTUNE_ASSIGN_OR_RETURN(o.apply_lora_to_mlp,
                          GetBoolArg(args, "apply_lora_to_mlp", false, builder));
  CCTUNE_ASSIGN_OR_RETURN(o.apply_lora_to_output,
                          GetBoolArg(args, "apply_lora_to_output", false, builder));
  CCTUNE_ASSIGN_OR_RETURN(o.lora_rank, GetIntArg(args, "lora_rank", 8, builder));
  CCTUNE_ASSIGN_OR_RETURN(o.lora_alpha, GetDoubleArg(args, "lora_alpha", 16.0, builder));
  CCTUNE_ASSIGN_OR_RETURN(o.lora_dropout, GetDoubleArg(args, "lora_dropout", 0.0, builder));
  return o;
}

// cctune.models.tiny.lora_tiny_llama: tiny_llama's arguments plus the LoRA ones (tests and
// the demo model).
ModelBuilderInfo TinyLoRABuilder() {
  ModelBuilderInfo info;
  info.name = "cctune.models.tiny.lora_tiny_llama";
  info.args = {"vocab_size",        "num_layers",        "num_heads",
               "num_kv_heads",      "embed_dim",         "intermediate_dim",
               "max_seq_len",       "tie_word_embeddings", "lora_attn_modules",
               "apply_lora_to_mlp", "apply_lora_to_output", "lora_rank",
               "lora_alpha",        "lora_dropout"};
  info.description = "LoRA tiny_llama (the demo model's builder with LoRA adapters)";
  info.build = [name = info.name](const ModelArgs& args)
      -> absl::StatusOr<std::unique_ptr<TransformerDecoder>> {
    DecoderConfig c;
    CCTUNE_ASSIGN_OR_RETURN(c.vocab_size, GetIntArg(args, "vocab_size", 256, name));
    CCTUNE_ASSIGN_OR_RETURN(c.num_layers, GetIntArg(args, "num_layers", 2, name));
    CCTUNE_ASSIGN_OR_RETURN(c.num_heads, GetIntArg(args, "num_heads", 8, name));
    CCTUNE_ASSIGN_OR_RETURN(c.num_kv_heads, GetIntArg(args, "num_kv_heads", 2, name));
    CCTUNE_ASSIGN_OR_RETURN(c.embed_dim, GetIntArg(args, "embed_dim", 64, name));
    CCTUNE_ASSIGN_OR_RETURN(c.intermediate_dim, GetIntArg(args, "intermediate_dim", 160, name));
    CCTUNE_ASSIGN_OR_RETURN(c.max_seq_len, GetIntArg(args, "max_seq_len", 256, name));
    CCTUNE_ASSIGN_OR_RETURN(c.tie_word_embeddings,
                            GetBoolArg(args, "tie_word_embeddings", false, name));
    c.norm_eps = 1e-5f;  // as models/tiny TinyLlama
    c.rope_base = 10000.0;
    CCTUNE_ASSIGN_OR_RETURN(LoRAOptions o, ParseTinyLoRAArgs(args, name));
    return BuildLoRADecoder(c, o);
  };
  return info;
}

// Adds the LoRA builders to ModelRegistry::Global() and makes them model components (with
// list-valued lora_attn_modules accepted). Idempotent.
absl::Status RegisterLoRAModelComponents() {
  static const absl::Status status = []() -> absl::Status {
    CCTUNE_RETURN_IF_ERROR(RegisterModelComponents());
    ModelRegistry& models = ModelRegistry::Global();
    CCTUNE_RETURN_IF_ERROR(RegisterLoRABuilders(models));
    if (!models.Find("cctune.models.tiny.lora_tiny_llama").ok()) {
      CCTUNE_RETURN_IF_ERROR(models.Register(TinyLoRABuilder()));
    }
    for (const std::string& name : models.Names()) {
      if (!absl::StrContains(name, ".lora_") || ModelComponentRegistry().Contains(name)) {
        continue;
      }
      CCTUNE_ASSIGN_OR_RETURN(const ModelBuilderInfo* info, models.Find(name));
      Schema schema("", info->description);
      for (const std::string& arg : info->args) {
        schema.Optional(arg, KeyType::Any(), "builder argument");
      }
      CCTUNE_RETURN_IF_ERROR(ModelComponentRegistry().Register(
          name, std::move(schema),
          [name](const ConfigNode& node, const ModelArgs& from_checkpoint)
              -> absl::StatusOr<std::unique_ptr<TransformerDecoder>> {
            CCTUNE_ASSIGN_OR_RETURN(const ModelBuilderInfo* info,
                                    ModelRegistry::Global().Find(name));
            const std::set<std::string> accepted(info->args.begin(), info->args.end());
            ModelArgs args;
            for (const auto& [key, value] : from_checkpoint) {
              if (accepted.count(key) != 0) args[key] = value;
            }
            for (const auto& [key, value] : node.entries()) {
              if (key == "_component_" || value.IsNull()) continue;
              args[key] = LoRAArgText(value);
            }
            return ModelRegistry::Global().Build(name, args);
          }));
    }
    return absl::OkStatus();
  }();
  return status;
}

}  // namespace

const Schema& LoRAFinetuneRecipeSchema() {
  static const Schema* const schema = new Schema(BuildSchema());
  return *schema;
}

absl::Status RegisterLoRAFinetuneComponents() {
  CCTUNE_RETURN_IF_ERROR(RegisterLoRAModelComponents());
  CCTUNE_RETURN_IF_ERROR(RegisterCheckpointers());
  CCTUNE_RETURN_IF_ERROR(RegisterTokenizers());
  CCTUNE_RETURN_IF_ERROR(RegisterDatasets());
  CCTUNE_RETURN_IF_ERROR(RegisterMetricLoggers());
  CCTUNE_RETURN_IF_ERROR(RegisterTrainingComponents());
  return absl::OkStatus();
}

std::vector<ConfigError> ValidateLoRAFinetuneConfig(const Config& config) {
  CCTUNE_CHECK_OK(RegisterLoRAFinetuneComponents());
  std::vector<ConfigError> errors = Validate(config, LoRAFinetuneRecipeSchema());
  Config resolved = config;
  if (!resolved.resolved()) resolved.ResolveCollectingErrors();
  if (const ConfigNode* ck = resolved.Find("checkpointer"); ck != nullptr && ck->IsMap()) {
    CheckCheckpointFilesExist(*ck, &errors);
  }
  for (const char* key : {"dataset", "validation_dataset"}) {
    for (ConfigError& e : MissingDatasetFiles(resolved.root(), key)) errors.push_back(e);
  }
  if (const ConfigNode* m = resolved.Find("model"); m != nullptr && m->IsMap()) {
    if (absl::Status s = AdapterConfigFromModelNode(*m).status(); !s.ok()) {
      ConfigError e;
      e.location = m->location();
      e.key = "model";
      e.message = std::string(s.message());
      errors.push_back(std::move(e));
    }
  }
  return errors;
}

absl::Status RunLoRAFinetuneRecipe(const Config& config) {
  CCTUNE_RETURN_IF_ERROR(RegisterLoRAFinetuneComponents());
  const ConfigNode root = WithDefaults(config.root(), LoRAFinetuneRecipeSchema());
  CCTUNE_ASSIGN_OR_RETURN(std::string device_name, root.GetString("device"));
  CCTUNE_ASSIGN_OR_RETURN(const Device device, TrainingDevice(device_name));

  CCTUNE_ASSIGN_OR_RETURN(std::string output_dir, root.GetString("output_dir"));
  CCTUNE_ASSIGN_OR_RETURN(std::string dtype_name, root.GetString("dtype"));
  Run run;
  CCTUNE_ASSIGN_OR_RETURN(run.dtype, RecipeDType(dtype_name));
  CCTUNE_ASSIGN_OR_RETURN(int64_t seed, root.GetInt("seed"));
  CCTUNE_ASSIGN_OR_RETURN(bool shuffle, root.GetBool("shuffle"));
  CCTUNE_ASSIGN_OR_RETURN(int64_t batch_size, root.GetInt("batch_size"));
  CCTUNE_ASSIGN_OR_RETURN(int64_t epochs, root.GetInt("epochs"));
  CCTUNE_ASSIGN_OR_RETURN(std::optional<int64_t> max_steps_per_epoch,
                          root.GetOptionalInt("max_steps_per_epoch"));
  CCTUNE_ASSIGN_OR_RETURN(int64_t accum, root.GetInt("gradient_accumulation_steps"));
  CCTUNE_ASSIGN_OR_RETURN(std::optional<double> clip, root.GetOptionalFloat("clip_grad_norm"));
  CCTUNE_ASSIGN_OR_RETURN(bool act_ckpt, root.GetBool("enable_activation_checkpointing"));
  CCTUNE_ASSIGN_OR_RETURN(int64_t log_every, root.GetInt("log_every_n_steps"));
  CCTUNE_ASSIGN_OR_RETURN(bool log_memory, root.GetBool("log_peak_memory_stats"));
  CCTUNE_ASSIGN_OR_RETURN(std::optional<int64_t> save_every,
                          root.GetOptionalInt("save_every_n_steps"));
  CCTUNE_ASSIGN_OR_RETURN(int64_t eval_every, root.GetInt("eval_every_n_steps"));
  CCTUNE_ASSIGN_OR_RETURN(bool resume, root.GetBool("resume_from_checkpoint"));
  CCTUNE_ASSIGN_OR_RETURN(std::optional<int64_t> stop_after,
                          root.GetOptionalInt("stop_after_steps"));
  CCTUNE_ASSIGN_OR_RETURN(bool opt_in_bwd, root.GetBool("optimizer_in_bwd"));
  if (opt_in_bwd) return absl::UnimplementedError("optimizer_in_bwd: true is not supported");

  // Tokenizer, initial weights, model.
  CCTUNE_ASSIGN_OR_RETURN(TokenizerComponent tok,
                          TokenizerRegistry().InstantiateKey(root, "tokenizer"));
  Generator gen(static_cast<uint64_t>(seed));
  const ConfigNode* model_node = root.Find("model");
  CCTUNE_CHECK(model_node != nullptr, "validated config without model");
  CCTUNE_ASSIGN_OR_RETURN(run.adapter_config, AdapterConfigFromModelNode(*model_node));
  const ConfigNode* ck_node = root.Find("checkpointer");
  // Adapters start from their own init (lora_a random, lora_b zero) for `seed`; with a
  // checkpoint only they are initialised (in an adapter-only arena, then copied in), not the
  // base that the checkpoint overwrites.
  if (ck_node != nullptr && !ck_node->IsNull()) {
    CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<Checkpointer> checkpointer,
                            CheckpointerRegistry().Instantiate(*ck_node));
    CCTUNE_ASSIGN_OR_RETURN(LoadedCheckpoint ckpt, checkpointer->LoadCheckpoint());
    CCTUNE_ASSIGN_OR_RETURN(run.model, ModelComponentRegistry().InstantiateKey(
                                           root, "model", ckpt.model_args));
    CCTUNE_ASSIGN_OR_RETURN(run.params, ParameterArena::Create(*run.model, run.dtype, device));
    CCTUNE_ASSIGN_OR_RETURN(ParameterLayout adapter_layout,
                            LoRATrainableLayout(*run.model, run.dtype));
    CCTUNE_ASSIGN_OR_RETURN(ParameterArena adapter_init,
                            ParameterArena::Allocate(adapter_layout, device));
    CCTUNE_RETURN_IF_ERROR(adapter_init.InitializeRandom(gen));
    CCTUNE_RETURN_IF_ERROR(
        run.params.LoadStateDict(adapter_init.ExportStateDict(), /*strict=*/false).status());
    StateDict base = ckpt.state_dict;
    if (run.params.layout().Find("output.weight") == nullptr) base.erase("output.weight");
    CCTUNE_ASSIGN_OR_RETURN(ParameterArena::LoadReport report,
                            run.params.LoadStateDict(base, /*strict=*/false));
    std::vector<std::string> problems;
    for (const std::string& name : report.missing) {
      if (!IsLoRAParameter(name)) problems.push_back(absl::StrCat("missing ", name));
    }
    for (const std::string& name : report.unexpected) {
      problems.push_back(absl::StrCat("unexpected ", name));
    }
    if (!problems.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint does not fit the LoRA model's base weights: ",
                       absl::StrJoin(problems, ", ")));
    }
  } else {
    CCTUNE_ASSIGN_OR_RETURN(run.model,
                            ModelComponentRegistry().InstantiateKey(root, "model", ModelArgs()));
    CCTUNE_ASSIGN_OR_RETURN(run.params, ParameterArena::Create(*run.model, run.dtype, device));
    CCTUNE_RETURN_IF_ERROR(run.params.InitializeRandom(gen));
  }
  if (NumLoRAParameters(*run.model) == 0) {
    return absl::InvalidArgumentError(
        "model: the builder has no LoRA adapters (use a lora_* builder, e.g. "
        "torchtune.models.llama3_2.lora_llama3_2_1b, with lora_attn_modules)");
  }
  if (tok.tokenizer->vocab_size() > run.model->vocab_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the tokenizer has ", tok.tokenizer->vocab_size(), " tokens but the model only ",
        run.model->vocab_size(), ": set model.vocab_size"));
  }
  run.hf_config = ModelHfConfig(*run.model, run.params, run.dtype);
  run.adapter_config.target_modules = LoRATargetModules(run.params.ExportStateDict());
  CCTUNE_ASSIGN_OR_RETURN(ParameterLayout trainable,
                          LoRATrainableLayout(*run.model, DType::kF32));
  CCTUNE_ASSIGN_OR_RETURN(run.grads, ParameterArena::Allocate(trainable, device));
  DecoderTrainerOptions trainer_options;
  trainer_options.activation_checkpointing = act_ckpt;
  trainer_options.frozen_if_missing = true;
  CCTUNE_ASSIGN_OR_RETURN(run.trainer,
                          DecoderTrainer::Create(run.model.get(), &run.grads, trainer_options));
  // LoRA dropout draws its masks from the recipe's generator, whose state the checkpoints
  // save (recipe_state rng) and a resume restores, so a resumed run drops the same elements.
  run.trainer->set_generator(&gen);
  CCTUNE_ASSIGN_OR_RETURN(std::vector<ParamBuffer> buffers,
                          LoRAParamBuffers(run.params, run.grads));
  CCTUNE_ASSIGN_OR_RETURN(run.optimizer,
                          OptimizerRegistry().InstantiateKey(root, "optimizer", buffers));
  run.base_lr = run.optimizer->lr();
  if (const ConfigNode* loss = root.Find("loss"); loss != nullptr && !loss->IsNull()) {
    CCTUNE_RETURN_IF_ERROR(LossRegistry().Instantiate(*loss).status());
  }

  // Data.
  DatasetContext ctx;
  ctx.tokenizer = tok.tokenizer.get();
  ctx.prompt_format = tok.prompt_format;
  ctx.max_seq_len = tok.max_seq_len.value_or(0);
  CCTUNE_ASSIGN_OR_RETURN(std::shared_ptr<const Dataset> dataset,
                          DatasetRegistry().InstantiateKey(root, "dataset", ctx));
  DataLoaderOptions lo;
  lo.batch_size = batch_size;
  lo.shuffle = shuffle;
  lo.seed = static_cast<uint64_t>(seed);
  lo.collate.pad_id = 0;
  CCTUNE_ASSIGN_OR_RETURN(DataLoader loader, DataLoader::Create(dataset, lo));
  std::optional<DataLoader> val_loader;
  if (const ConfigNode* v = root.Find("validation_dataset"); v != nullptr && !v->IsNull()) {
    CCTUNE_ASSIGN_OR_RETURN(std::shared_ptr<const Dataset> val,
                            DatasetRegistry().Instantiate(*v, ctx));
    DataLoaderOptions vo = lo;
    vo.shuffle = false;
    vo.drop_last = false;
    CCTUNE_ASSIGN_OR_RETURN(DataLoader vl, DataLoader::Create(val, vo));
    val_loader.emplace(std::move(vl));
  }
  int64_t steps_per_epoch = loader.batches_per_epoch() / accum;
  if (max_steps_per_epoch.has_value() && *max_steps_per_epoch < steps_per_epoch) {
    steps_per_epoch = *max_steps_per_epoch;
  }
  if (steps_per_epoch < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dataset '", dataset->source(), "' has ", loader.batches_per_epoch(),
        " batches of batch_size ", batch_size, ": fewer than gradient_accumulation_steps (",
        accum, ")"));
  }
  const int64_t total_steps = steps_per_epoch * epochs;
  if (const ConfigNode* s = root.Find("lr_scheduler"); s != nullptr && !s->IsNull()) {
    CCTUNE_ASSIGN_OR_RETURN(CosineScheduleWithWarmup sched,
                            LrSchedulerRegistry().Instantiate(*s, total_steps));
    run.schedule.emplace(sched);
  }

  // Resume.
  int64_t step = 0;
  int64_t tokens_seen = 0;
  std::string last_checkpoint = "(none)";
  if (resume) {
    const std::string latest_path = absl::StrCat(output_dir, "/", kLatestFile);
    if (!fs::exists(latest_path)) {
      return absl::NotFoundError(absl::StrCat(
          "resume_from_checkpoint: true, but ", latest_path,
          " does not exist (no checkpoint was saved in output_dir ", output_dir, ")"));
    }
    CCTUNE_ASSIGN_OR_RETURN(std::string latest, ReadFileToString(latest_path));
    latest = std::string(absl::StripAsciiWhitespace(latest));
    const std::string dir = absl::StrCat(output_dir, "/", latest);
    // The base is the checkpointer's (loaded above); the adapters are the checkpoint's.
    CCTUNE_ASSIGN_OR_RETURN(PeftAdapter adapter, LoadPeftAdapter(dir, run.hf_config));
    CCTUNE_ASSIGN_OR_RETURN(ParameterArena::LoadReport report,
                            run.params.LoadStateDict(adapter.state_dict, /*strict=*/false));
    if (!report.unexpected.empty() ||
        report.loaded.size() != run.grads.layout().entries().size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "resume: the adapter in ", dir, " does not match the model's adapters (",
          report.loaded.size(), " loaded, unexpected: ", absl::StrJoin(report.unexpected, ", "),
          ")"));
    }
    CCTUNE_ASSIGN_OR_RETURN(RecipeState state,
                            LoadRecipeState(absl::StrCat(dir, "/", kRecipeStateFile)));
    if (state.proto.seed() != static_cast<uint64_t>(seed)) {
      return absl::InvalidArgumentError(absl::StrCat("resume: ", dir, " was trained with seed ",
                                                     state.proto.seed(), ", config has ", seed));
    }
    CCTUNE_ASSIGN_OR_RETURN(OptimizerState os, GetOptimizerState(state));
    CCTUNE_RETURN_IF_ERROR(run.optimizer->ImportState(os));
    CCTUNE_RETURN_IF_ERROR(RestoreDataLoaderPosition(state.proto.data(), dir, &loader));
    RestoreRngState(state.proto.rng(), &gen);
    step = state.proto.step();
    tokens_seen = state.proto.tokens_seen();
    last_checkpoint = dir;
    std::fprintf(stderr, "Resumed from %s at step %lld\n", dir.c_str(),
                 static_cast<long long>(step));
  }

  std::unique_ptr<MetricLogger> logger;
  if (const ConfigNode* m = root.Find("metric_logger"); m != nullptr && !m->IsNull()) {
    CCTUNE_ASSIGN_OR_RETURN(logger, MetricLoggerRegistry().Instantiate(*m));
  } else {
    logger = std::make_unique<StdoutLogger>();
  }
  std::fprintf(stderr,
               "Model has %lld parameters (%s), %lld of them trainable (LoRA); %lld samples, "
               "%lld steps per epoch, %lld epochs\n",
               static_cast<long long>(run.params.NumParameters()), dtype_name.c_str(),
               static_cast<long long>(NumLoRAParameters(*run.model)),
               static_cast<long long>(dataset->size()), static_cast<long long>(steps_per_epoch),
               static_cast<long long>(epochs));

  auto make_state = [&](int64_t epoch) {
    RecipeState state;
    state.proto.set_step(step);
    state.proto.set_epoch(epoch);
    state.proto.set_seed(static_cast<uint64_t>(seed));
    *state.proto.mutable_rng() = RngStateToProto(gen);
    *state.proto.mutable_data() = DataLoaderPositionToProto(loader);
    state.proto.set_tokens_seen(tokens_seen);
    return state;
  };
  auto save = [&](int64_t epoch) -> absl::Status {
    CCTUNE_RETURN_IF_ERROR(SaveCheckpoint(output_dir, run, make_state(epoch)));
    last_checkpoint = absl::StrCat(output_dir, "/step_", step);
    return absl::OkStatus();
  };

  ResetPeakMemory(device);
  const double clip_norm = clip.value_or(0.0);
  // On a terminal only (stderr redirected to a file stays clean).
  ProgressBar progress("train", total_steps);
  progress.Update(step);
  progress.ResetClock();
  // The loader's position (epoch, batch) is the truth; a finished epoch (by max_steps) moves on.
  while (loader.position().epoch < epochs) {
    const int64_t epoch = loader.position().epoch;
    if (loader.position().batch_index / accum >= steps_per_epoch || loader.EpochDone()) {
      CCTUNE_RETURN_IF_ERROR(loader.StartEpoch(epoch + 1));
      continue;
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<MicroBatch> micro;
    int64_t step_tokens = 0;
    for (int64_t a = 0; a < accum; ++a) {
      CCTUNE_ASSIGN_OR_RETURN(Batch batch, loader.Next());
      step_tokens += batch.num_tokens;
      CCTUNE_ASSIGN_OR_RETURN(MicroBatch mb, ToMicroBatch(batch));
      micro.push_back(std::move(mb));
    }
    const double lr =
        run.schedule.has_value() ? run.schedule->Lr(run.base_lr, run.optimizer->step()) : run.base_lr;
    run.optimizer->set_lr(lr);
    absl::StatusOr<TrainStepResult> r = TrainStep(*run.trainer, *run.optimizer, micro, clip_norm);
    if (!r.ok()) {
      return absl::Status(r.status().code(),
                          absl::StrCat("training stopped at step ", step + 1, " (epoch ", epoch,
                                       "): ", r.status().message(),
                                       "; the last good checkpoint is ", last_checkpoint));
    }
    if (!std::isfinite(r->loss)) {
      return absl::FailedPreconditionError(
          absl::StrCat("training stopped at step ", step + 1, ": non-finite loss ", r->loss,
                       "; the last good checkpoint is ", last_checkpoint));
    }
    ++step;
    tokens_seen += step_tokens;
    progress.Update(step, absl::StrFormat("loss=%.4f", r->loss));
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const bool epoch_end = loader.position().batch_index / accum >= steps_per_epoch ||
                           loader.batches_per_epoch() - loader.position().batch_index < accum;
    if (step % log_every == 0) {
      Metrics m = {{"loss", r->loss},
                   {"lr", lr},
                   {"grad_norm", r->grad_norm},
                   {"tokens_per_second", seconds > 0 ? step_tokens / seconds : 0.0},
                   {"epoch", static_cast<double>(epoch)}};
      if (log_memory) {
        m.push_back({"peak_memory_gb", GetMemoryStats(device).peak_bytes / 1e9});
      }
      CCTUNE_RETURN_IF_ERROR(logger->LogDict(m, step));
    }
    if (val_loader.has_value() &&
        ((eval_every > 0 && step % eval_every == 0) || (eval_every == 0 && epoch_end))) {
      CCTUNE_ASSIGN_OR_RETURN(double vloss, ValidationLoss(*run.trainer, *val_loader));
      CCTUNE_RETURN_IF_ERROR(logger->LogDict({{"val_loss", vloss}}, step));
    }
    const bool stop = stop_after.has_value() && step >= *stop_after;
    if (epoch_end) CCTUNE_RETURN_IF_ERROR(loader.StartEpoch(epoch + 1));
    if (epoch_end || stop || (save_every.has_value() && step % *save_every == 0)) {
      CCTUNE_RETURN_IF_ERROR(save(loader.position().epoch));
    }
    if (stop) {
      std::fprintf(stderr, "Stopping after %lld steps (stop_after_steps)\n",
                   static_cast<long long>(step));
      break;
    }
  }
  progress.Close();
  CCTUNE_RETURN_IF_ERROR(logger->Close());
  return absl::OkStatus();
}

int LoRAFinetuneMain(const std::vector<std::string>& args) {
  const char* const prog = "lora_finetune_single_device";
  std::string config_arg;
  std::vector<std::string> overrides;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      std::fprintf(stdout, "usage: %s --config <path or built-in name> [key=value ...]\n\n%s",
                   prog, LoRAFinetuneRecipeSchema().Describe().c_str());
      return 0;
    }
    if (a == "--config") {
      if (i + 1 >= args.size()) {
        std::fprintf(stderr, "%s: --config needs a value\n", prog);
        return 2;
      }
      config_arg = args[++i];
    } else if (absl::StartsWith(a, "--config=")) {
      config_arg = a.substr(9);
    } else {
      overrides.push_back(a);
    }
  }
  if (config_arg.empty()) {
    std::fprintf(stderr, "usage: %s --config <path or built-in name> [key=value ...]\n", prog);
    return 2;
  }
  absl::Status registered = RegisterLoRAFinetuneComponents();
  if (!registered.ok()) {
    std::fprintf(stderr, "%s: %s\n", prog, registered.ToString().c_str());
    return 1;
  }
  absl::StatusOr<Config> config = LoadUnresolvedRecipeConfig(config_arg, overrides);
  if (!config.ok()) {
    std::fprintf(stderr, "%s: %s\n", prog, std::string(config.status().message()).c_str());
    return 1;
  }
  const std::vector<ConfigError> errors = ValidateLoRAFinetuneConfig(*config);
  if (!errors.empty()) {
    std::fprintf(stderr, "%s: %s\n", prog, std::string(ErrorsToStatus(errors).message()).c_str());
    return 1;
  }
  absl::Status resolved = config->Resolve();
  if (!resolved.ok()) {
    std::fprintf(stderr, "%s: %s\n", prog, std::string(resolved.message()).c_str());
    return 1;
  }
  std::fprintf(stderr, "Running %s with resolved config:\n\n%s\n", prog,
               config->ToYaml().c_str());
  absl::Status st = RunLoRAFinetuneRecipe(*config);
  if (!st.ok()) {
    std::fprintf(stderr, "%s: %s\n", prog, std::string(st.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace cctune
