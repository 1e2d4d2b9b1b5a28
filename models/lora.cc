#include "models/lora.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "modules/linear.h"
#include "modules/lora_linear.h"
#include "modules/nf4_linear.h"
#include "modules/transformer_self_attention_layer.h"

namespace cctune {

namespace {

constexpr const char* kAttnModules[] = {"q_proj", "k_proj", "v_proj", "output_proj"};

}  // namespace

absl::Status CheckLoRAOptions(const LoRAOptions& lora, const DecoderConfig& c) {
  for (const std::string& m : lora.lora_attn_modules) {
    if (std::find(std::begin(kAttnModules), std::end(kAttnModules), m) == std::end(kAttnModules)) {
      return absl::InvalidArgumentError(
          absl::StrCat("LoRA: unknown lora_attn_modules entry '", m,
                       "' (expected q_proj, k_proj, v_proj or output_proj)"));
    }
  }
  if (lora.lora_rank <= 0 || lora.lora_rank > kMaxDecoderWidth) {
    return absl::InvalidArgumentError(absl::StrCat("LoRA: lora_rank (", lora.lora_rank,
                                                   ") must be in [1, ", kMaxDecoderWidth, "]"));
  }
  if (!std::isfinite(lora.lora_alpha)) {
    return absl::InvalidArgumentError(
        absl::StrCat("LoRA: lora_alpha (", lora.lora_alpha, ") must be finite"));
  }
  if (!(lora.lora_dropout >= 0.0 && lora.lora_dropout < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("LoRA: lora_dropout (", lora.lora_dropout, ") must be in [0, 1)"));
  }
  if (lora.apply_lora_to_output && c.tie_word_embeddings) {
    return absl::InvalidArgumentError(
        "LoRA: apply_lora_to_output is incompatible with tied word embeddings");
  }
  return absl::OkStatus();
}

ProjectionFactory LoRAProjections(const LoRAOptions& lora) {
  return [lora](absl::string_view name, int64_t in_dim, int64_t out_dim,
                bool bias) -> absl::StatusOr<std::unique_ptr<Linear>> {
    const bool mlp = name == "w1" || name == "w2" || name == "w3";
    const bool adapt = (mlp && lora.apply_lora_to_mlp) ||
                       (name == "output" && lora.apply_lora_to_output) ||
                       std::find(lora.lora_attn_modules.begin(), lora.lora_attn_modules.end(),
                                 name) != lora.lora_attn_modules.end();
    // torchtune: with quantize_base every attention and MLP base is NF4 (LoRALinear or
    // FrozenNF4Linear); the output never is ("quantize_base is not applied to final
    // output_proj currently"), with or without its adapter.
    const bool nf4 = lora.quantize_base && name != "output";
    if (nf4) {
      CCTUNE_RETURN_IF_ERROR(CheckNf4Shape(in_dim, out_dim, absl::StrCat(name, ".weight")));
    }
    if (!adapt) {
      if (nf4) return std::make_unique<FrozenNF4Linear>(in_dim, out_dim, bias);
      return std::make_unique<Linear>(in_dim, out_dim, bias);
    }
    return std::make_unique<LoRALinear>(in_dim, out_dim, lora.lora_rank, lora.lora_alpha,
                                        lora.lora_dropout, bias, nf4);
  };
}

absl::StatusOr<std::unique_ptr<TransformerDecoder>> BuildLoRADecoder(const DecoderConfig& config,
                                                                     const LoRAOptions& lora) {
  CCTUNE_RETURN_IF_ERROR(CheckLoRAOptions(lora, config));
  return BuildDecoder(config, LoRAProjections(lora));
}

bool IsLoRAParameter(absl::string_view name) {
  return absl::StrContains(name, "lora_a.") || absl::StrContains(name, "lora_b.");
}

absl::StatusOr<ParameterLayout> LoRATrainableLayout(const Module& model, DType dtype) {
  CCTUNE_ASSIGN_OR_RETURN(ParameterLayout all, ParameterLayout::FromModule(model, dtype));
  std::vector<ParameterSpec> specs;
  for (const ParameterLayout::Entry& e : all.entries()) {
    if (!IsLoRAParameter(e.spec.name)) continue;
    ParameterSpec s = e.spec;
    s.dtype = dtype;
    specs.push_back(std::move(s));
  }
  return ParameterLayout::Create(std::move(specs));
}

int64_t NumLoRAParameters(const Module& model) {
  int64_t n = 0;
  for (const auto& [name, p] : model.NamedParameters()) {
    if (!IsLoRAParameter(name)) continue;
    int64_t numel = 1;
    for (int64_t s : p->shape) numel *= s;
    n += numel;
  }
  return n;
}

absl::StatusOr<std::vector<ParamBuffer>> LoRAParamBuffers(const ParameterArena& params,
                                                          const ParameterArena& grads) {
  std::vector<ParamBuffer> out;
  for (const auto& [name, g] : grads.named_tensors()) {
    CCTUNE_ASSIGN_OR_RETURN(Tensor p, params.Get(name));
    if (p.shape() != g.shape()) {
      return absl::InvalidArgumentError(
          absl::StrCat("LoRAParamBuffers: ", name, " is ", ShapeToString(p.shape()),
                       " but its gradient is ", ShapeToString(g.shape())));
    }
    std::string buffer_name = name;
    std::replace(buffer_name.begin(), buffer_name.end(), '.', '_');
    out.push_back({std::move(buffer_name), p, g});
  }
  return out;
}

absl::Status MergeLoRA(TransformerDecoder& model) {
  auto merge = [](const Linear& l) -> absl::Status {
    // The model owns its modules mutably; the accessors are const.
    if (auto* lora = dynamic_cast<LoRALinear*>(const_cast<Linear*>(&l)); lora != nullptr) {
      return lora->Merge();
    }
    return absl::OkStatus();
  };
  for (size_t i = 0; i < model.num_layers(); ++i) {
    const TransformerSelfAttentionLayer& layer = model.layer(i);
    CCTUNE_RETURN_IF_ERROR(merge(layer.attn().q_proj()));
    CCTUNE_RETURN_IF_ERROR(merge(layer.attn().k_proj()));
    CCTUNE_RETURN_IF_ERROR(merge(layer.attn().v_proj()));
    CCTUNE_RETURN_IF_ERROR(merge(layer.attn().output_proj()));
    CCTUNE_RETURN_IF_ERROR(merge(layer.mlp().w1()));
    CCTUNE_RETURN_IF_ERROR(merge(layer.mlp().w2()));
    CCTUNE_RETURN_IF_ERROR(merge(layer.mlp().w3()));
  }
  if (const auto* out = dynamic_cast<const Linear*>(&model.output()); out != nullptr) {
    CCTUNE_RETURN_IF_ERROR(merge(*out));
  }
  return absl::OkStatus();
}

StateDict BaseStateDict(const StateDict& state_dict) {
  StateDict out;
  for (const auto& [name, t] : state_dict) {
    if (!IsLoRAParameter(name)) out.emplace(name, t);
  }
  return out;
}

}  // namespace cctune
