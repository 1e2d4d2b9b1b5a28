#include "recipes/lora_finetune_single_device.h"

#include <cstdio>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "checkpoint/checkpointer_components.h"
#include "checkpoint/hf.h"
#include "checkpoint/peft.h"
#include "config/validate.h"
#include "core/device.h"
#include "core/random.h"
#include "core/status.h"
#include "data/collate.h"
#include "data/data_loader.h"
#include "data/dataset_components.h"
#include "models/decoder_builder.h"
#include "models/lora.h"
#include "models/registry.h"
#include "modules/parameters.h"
#include "recipes/builtin_configs.h"
#include "recipes/checkpoint_dir.h"
#include "recipes/config_checks.h"
#include "recipes/finetune_loop.h"
#include "recipes/finetune_utils.h"
#include "recipes/model_components.h"
#include "tokenizers/tokenizer_components.h"
#include "training/decoder_trainer.h"
#include "training/metric_logger_components.h"
#include "training/recipe_state.h"
#include "training/train_step.h"
#include "training/training_components.h"

namespace cctune {

namespace {


Schema BuildSchema() {
  return FinetuneRecipeSchema(
      "lora_finetune_single_device",
      "LoRA fine-tune on one device (recipes/lora_finetune_single_device)",
      "checkpoints (step_<N>/: adapter, merged weights, state; LATEST) and logs",
      "LoRA model builder (torchtune.models.*.lora_*)",
      "base weights (HF or llama2.c); null: random init from seed");
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

// Writes the weights of <output_dir>/step_<step>/, then FinishCheckpoint.
absl::Status SaveCheckpoint(const std::string& output_dir, const Run& run, RecipeState state) {
  const std::string name = CheckpointName(state.proto.step());
  const std::string dir = absl::StrCat(output_dir, "/", name);
  const StateDict state_dict = run.params.ExportStateDict();
  CCTUNE_RETURN_IF_ERROR(SavePeftAdapter(dir, state_dict, run.adapter_config, run.hf_config));
  CCTUNE_ASSIGN_OR_RETURN(
      StateDict merged,
      MergedStateDict(state_dict, run.adapter_config.lora_alpha /
                                      static_cast<double>(run.adapter_config.r)));
  HfSaveOptions save_options;
  CCTUNE_RETURN_IF_ERROR(SaveHfCheckpoint(dir, merged, run.hf_config, save_options));
  return FinishCheckpoint(output_dir, name, *run.optimizer, std::move(state));
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
      CCTUNE_RETURN_IF_ERROR(RegisterModelComponent(name, /*list_args=*/true));
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
  CheckCheckpointerOutputDir(resolved.root(), &errors);
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
  CCTUNE_ASSIGN_OR_RETURN(const FinetuneSettings s, ReadFinetuneSettings(root));
  const Device& device = s.device;
  const std::string& output_dir = s.output_dir;
  const int64_t seed = s.seed;
  Run run;
  run.dtype = s.dtype;

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
    CCTUNE_RETURN_IF_ERROR(CheckModelMatchesCheckpoint(*run.model, ckpt));
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
  trainer_options.activation_checkpointing = s.activation_checkpointing;
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
  CCTUNE_RETURN_IF_ERROR(ApplyLossComponent(root, run.trainer.get()));

  // Data.
  CCTUNE_ASSIGN_OR_RETURN(FinetuneData data, MakeFinetuneData(root, tok, s));
  DataLoader& loader = *data.loader;
  run.schedule = data.schedule;

  // Resume.
  RunProgress progress;
  if (s.resume) {
    CCTUNE_ASSIGN_OR_RETURN(const std::string dir, LatestCheckpointDir(output_dir));
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
    CCTUNE_ASSIGN_OR_RETURN(progress,
                            RestoreRecipeState(dir, seed, *run.optimizer, loader, gen));
  }

  CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<MetricLogger> logger, MakeMetricLogger(root));
  std::fprintf(stderr,
               "Model has %lld parameters (%s), %lld of them trainable (LoRA); %lld samples, "
               "%lld steps per epoch, %lld epochs\n",
               static_cast<long long>(run.params.NumParameters()), s.dtype_name.c_str(),
               static_cast<long long>(NumLoRAParameters(*run.model)),
               static_cast<long long>(data.dataset->size()),
               static_cast<long long>(data.steps_per_epoch), static_cast<long long>(s.epochs));

  TrainingLoop loop = MakeTrainingLoop(s, data);
  loop.trainer = run.trainer.get();
  loop.optimizer = run.optimizer.get();
  loop.schedule = run.schedule.has_value() ? &*run.schedule : nullptr;
  loop.base_lr = run.base_lr;
  loop.loader = &loader;
  loop.val_loader = data.val_loader.has_value() ? &*data.val_loader : nullptr;
  loop.logger = logger.get();
  loop.save = [&](int64_t epoch) -> absl::StatusOr<std::string> {
    CCTUNE_RETURN_IF_ERROR(
        SaveCheckpoint(output_dir, run, MakeRecipeState(progress, epoch, seed, gen, loader)));
    return absl::StrCat(output_dir, "/", CheckpointName(progress.step));
  };
  return RunTrainingLoop(loop, progress);
}

int LoRAFinetuneMain(const std::vector<std::string>& args) {
  return RecipeMain({"lora_finetune_single_device", &LoRAFinetuneRecipeSchema,
                     RegisterLoRAFinetuneComponents, ValidateLoRAFinetuneConfig,
                     RunLoRAFinetuneRecipe},
                    args);
}

}  // namespace cctune
