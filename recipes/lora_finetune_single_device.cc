#include "recipes/lora_finetune_single_device.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "checkpoint/atomic_file.h"
#include "checkpoint/hf.h"
#include "checkpoint/peft.h"
#include "core/status.h"
#include "models/decoder_builder.h"
#include "models/lora.h"
#include "models/qlora.h"
#include "models/registry.h"
#include "recipes/finetune_recipe.h"

namespace cctune {

namespace {

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

// Whether a model node builds QLoRA: a qlora_ builder (unless quantize_base: false) or
// quantize_base: true.
bool IsQLoRAModelNode(const ConfigNode& model) {
  const ConfigNode* q = model.Find("quantize_base");
  if (q != nullptr && q->kind() == ConfigNode::Kind::kBool) return q->bool_value();
  const ConfigNode* c = model.Find("_component_");
  return c != nullptr && c->kind() == ConfigNode::Kind::kString &&
         absl::StrContains(c->string_value(), ".qlora_");
}

// Only the adapters train (the base is frozen: no gradients, no optimizer state); a
// checkpoint holds the PEFT adapter and the merged weights (W + alpha/rank * B.A).
class LoRAStrategy final : public FinetuneStrategy {
 public:
  FinetuneRecipeDocs docs() const override {
    return {"lora_finetune_single_device",
            "LoRA fine-tune on one device (recipes/lora_finetune_single_device)",
            "checkpoints (step_<N>/: adapter, merged weights, state; LATEST) and logs",
            "LoRA model builder (torchtune.models.*.lora_*)",
            "base weights (HF or llama2.c); null: random init from seed"};
  }
  void ExtendSchema(Schema& schema) const override {
    schema.Default("save_adapter_weights_only", KeyType::Bool(), ConfigNode::Bool(false),
                   "checkpoints hold only the adapter (+ adapter_config.json, config.json and "
                   "the recipe state), no merged weights");
    schema.Default("low_cpu_ram", KeyType::Bool(), ConfigNode::Bool(false),
                   "torchtune's QLoRA save through a memory-mapped file (only false: the merged "
                   "bf16 weights are built in memory; the NF4 load never holds a "
                   "full-precision copy)");
  }
  void Validate(const ConfigNode& root, std::vector<ConfigError>* errors) const override {
    const ConfigNode* m = root.Find("model");
    if (m == nullptr || !m->IsMap()) return;
    if (const ConfigNode* low = root.Find("low_cpu_ram");
        low != nullptr && low->kind() == ConfigNode::Kind::kBool && low->bool_value()) {
      errors->push_back(low->MakeError(
          "low_cpu_ram: true (torchtune's save of QLoRA's merged weights through a "
          "memory-mapped file) is not implemented; set it to false"));
    }
    if (IsQLoRAModelNode(*m)) {
      const ConfigNode* ck = root.Find("checkpointer");
      if (ck == nullptr || ck->IsNull()) {
        ConfigError e;
        e.location = m->location();
        e.key = "checkpointer";
        e.message = "QLoRA (a qlora_ builder or quantize_base: true) quantizes the "
                    "checkpoint's base weights to NF4: set a checkpointer";
        errors->push_back(std::move(e));
      }
    }
    if (absl::Status s = AdapterConfigFromModelNode(*m).status(); !s.ok()) {
      errors->push_back(m->MakeError(std::string(s.message())));
    }
  }

  absl::Status Configure(const ConfigNode& root) override {
    const ConfigNode* model = root.Find("model");
    CCTUNE_CHECK(model != nullptr, "validated config without model");
    CCTUNE_ASSIGN_OR_RETURN(adapter_config_, AdapterConfigFromModelNode(*model));
    CCTUNE_ASSIGN_OR_RETURN(adapter_only_, root.GetBool("save_adapter_weights_only"));
    return absl::OkStatus();
  }

  // The base from the checkpoint (adapter names missing from it); the adapters from their own
  // init for the seed (lora_a random, lora_b zero), in an adapter-only arena copied in, so that
  // the generator draws for them only.
  absl::StatusOr<ParameterArena> LoadCheckpointWeights(TransformerDecoder& model,
                                                       const LoadedCheckpoint& ckpt, DType dtype,
                                                       const Device& device,
                                                       Generator& gen) override {
    nf4_layers_ = Nf4Layers(model);
    if (!nf4_layers_.empty() && !device.is_cpu()) {
      return absl::UnimplementedError(absl::StrCat(
          "QLoRA: the NF4 base runs on the CPU only (device: ", device.ToString(),
          "); set device: cpu, or use the lora_ builder"));
    }
    CCTUNE_ASSIGN_OR_RETURN(ParameterArena params, ParameterArena::Create(model, dtype, device));
    CCTUNE_ASSIGN_OR_RETURN(ParameterLayout adapter_layout, LoRATrainableLayout(model, dtype));
    CCTUNE_ASSIGN_OR_RETURN(ParameterArena adapter_init,
                            ParameterArena::Allocate(adapter_layout, device));
    CCTUNE_RETURN_IF_ERROR(adapter_init.InitializeRandom(gen));
    CCTUNE_RETURN_IF_ERROR(
        params.LoadStateDict(adapter_init.ExportStateDict(), /*strict=*/false).status());
    StateDict base = ckpt.state_dict;
    if (params.layout().Find("output.weight") == nullptr) base.erase("output.weight");
    // QLoRA: the NF4 layers' weights are quantized into the arena one tensor at a time (from
    // the mapped checkpoint, no full-precision copy of the model), the rest loaded as is.
    CCTUNE_ASSIGN_OR_RETURN(const std::vector<std::string> quantized,
                            QuantizeNf4Weights(base, nf4_layers_, params));
    for (const std::string& name : quantized) base.erase(name);
    CCTUNE_ASSIGN_OR_RETURN(ParameterArena::LoadReport report,
                            params.LoadStateDict(base, /*strict=*/false));
    std::vector<std::string> problems;
    for (const std::string& name : report.missing) {
      if (!IsLoRAParameter(name) && !IsNf4Parameter(name, nf4_layers_)) {
        problems.push_back(absl::StrCat("missing ", name));
      }
    }
    for (const std::string& name : report.unexpected) {
      problems.push_back(absl::StrCat("unexpected ", name));
    }
    if (!problems.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint does not fit the LoRA model's base weights: ",
                       absl::StrJoin(problems, ", ")));
    }
    return params;
  }

  absl::Status AfterLoad(const TransformerDecoder& model, const ParameterArena& params) override {
    if (NumLoRAParameters(model) == 0) {
      return absl::InvalidArgumentError(
          "model: the builder has no LoRA adapters (use a lora_* builder, e.g. "
          "torchtune.models.llama3_2.lora_llama3_2_1b, with lora_attn_modules)");
    }
    adapter_config_.target_modules = LoRATargetModules(params.ExportStateDict());
    return absl::OkStatus();
  }

  std::string DescribeTrainable(const TransformerDecoder& model) const override {
    std::string s = absl::StrCat(", ", NumLoRAParameters(model), " of them trainable (LoRA)");
    if (!nf4_layers_.empty()) {
      const ParameterBytes b = CountParameterBytes(model, DType::kBF16);
      absl::StrAppend(&s, absl::StrFormat(
                              "; QLoRA: %d base projections (%lld weights) in NF4, %.1f MiB "
                              "(%.1f MiB in bf16)",
                              nf4_layers_.size(), static_cast<long long>(b.nf4_elements),
                              b.nf4 / 1048576.0, b.nf4_elements * 2 / 1048576.0));
    }
    return s;
  }

  absl::StatusOr<ParameterLayout> TrainableLayout(const TransformerDecoder& model,
                                                  const ParameterArena& params) const override {
    return LoRATrainableLayout(model, DType::kF32);
  }
  void ConfigureTrainer(DecoderTrainerOptions* options) const override {
    options->frozen_if_missing = true;
  }
  absl::StatusOr<std::vector<ParamBuffer>> OptimizerBuffers(
      const ParameterArena& params, const ParameterArena& grads) const override {
    return LoRAParamBuffers(params, grads);
  }

  absl::Status SaveWeights(const std::string& dir, const ParameterArena& params,
                           const HfModelConfig& config) const override {
    StateDict state_dict = params.ExportStateDict();
    CCTUNE_RETURN_IF_ERROR(SavePeftAdapter(dir, state_dict, adapter_config_, config));
    if (adapter_only_) {
      // config.json still: the model's shape, and what marks a checkpoint complete.
      CCTUNE_ASSIGN_OR_RETURN(const std::string json, config.ToJson());
      return WriteFileAtomically(absl::StrCat(dir, "/config.json"), json);
    }
    if (!nf4_layers_.empty()) {
      // QLoRA: the merged weights are the dequantized NF4 base (+ the adapters) in bf16, as
      // torchtune saves them; the base itself is never written in NF4. This is the one time
      // the whole base exists in bf16 (as in torchtune's state-dict hook).
      CCTUNE_ASSIGN_OR_RETURN(state_dict,
                              DequantizedStateDict(state_dict, nf4_layers_, DType::kBF16));
    }
    CCTUNE_ASSIGN_OR_RETURN(
        StateDict merged,
        MergedStateDict(state_dict,
                        adapter_config_.lora_alpha / static_cast<double>(adapter_config_.r)));
    return SaveHfCheckpoint(dir, merged, config, HfSaveOptions());
  }

  // The base stays the checkpointer's (loaded by the model step); the adapters are `dir`'s.
  absl::Status RestoreWeights(const std::string& dir, const HfModelConfig& config,
                              const ParameterLayout& trainable,
                              ParameterArena& params) const override {
    CCTUNE_ASSIGN_OR_RETURN(PeftAdapter adapter, LoadPeftAdapter(dir, config));
    CCTUNE_ASSIGN_OR_RETURN(ParameterArena::LoadReport report,
                            params.LoadStateDict(adapter.state_dict, /*strict=*/false));
    if (!report.unexpected.empty() || report.loaded.size() != trainable.entries().size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "resume: the adapter in ", dir, " does not match the model's adapters (",
          report.loaded.size(), " loaded, unexpected: ", absl::StrJoin(report.unexpected, ", "),
          ")"));
    }
    return absl::OkStatus();
  }

 private:
  PeftAdapterConfig adapter_config_;
  bool adapter_only_ = false;  // save_adapter_weights_only
  std::vector<std::string> nf4_layers_;  // QLoRA's NF4 projections (models/qlora.h)
};

}  // namespace

const RecipeEntry& LoRAFinetuneRecipe() { return FinetuneRecipeOf<LoRAStrategy>(); }

std::unique_ptr<FinetuneStrategy> MakeLoRAFinetuneStrategy() { return std::make_unique<LoRAStrategy>(); }

}  // namespace cctune
