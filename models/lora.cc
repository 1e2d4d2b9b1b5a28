#include "models/lora.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/status.h"
#include "modules/attention.h"
#include "modules/embedding.h"
#include "modules/feed_forward.h"
#include "modules/linear.h"
#include "modules/lora_linear.h"
#include "modules/rms_norm.h"
#include "modules/rotary_positional_embeddings.h"
#include "modules/tied_linear.h"
#include "modules/transformer_self_attention_layer.h"

namespace cctune {

namespace {

constexpr const char* kAttnModules[] = {"q_proj", "k_proj", "v_proj", "output_proj"};

absl::Status CheckOptions(const LoRAOptions& lora, const DecoderConfig& c) {
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

}  // namespace

absl::StatusOr<std::unique_ptr<TransformerDecoder>> BuildLoRADecoder(const DecoderConfig& config,
                                                                     const LoRAOptions& lora) {
  // BuildDecoder validates the numbers (allocating nothing); its result is discarded.
  CCTUNE_RETURN_IF_ERROR(BuildDecoder(config).status());
  CCTUNE_RETURN_IF_ERROR(CheckOptions(lora, config));
  DecoderConfig c = config;
  if (c.num_kv_heads == 0) c.num_kv_heads = c.num_heads;
  if (c.head_dim == 0) c.head_dim = c.embed_dim / c.num_heads;
  const int64_t d = c.embed_dim, n_h = c.num_heads, n_kv = c.num_kv_heads, h_d = c.head_dim;
  auto wants = [&](const char* name) {
    return std::find(lora.lora_attn_modules.begin(), lora.lora_attn_modules.end(), name) !=
           lora.lora_attn_modules.end();
  };
  auto proj = [&](bool adapt, int64_t in, int64_t out, bool bias) -> std::unique_ptr<Linear> {
    if (adapt) {
      return std::make_unique<LoRALinear>(in, out, lora.lora_rank, lora.lora_alpha,
                                          lora.lora_dropout, bias);
    }
    return std::make_unique<Linear>(in, out, bias);
  };

  auto rope = std::make_shared<RotaryPositionalEmbeddings>(h_d, c.max_seq_len, c.rope_base,
                                                           c.rope_pairing, c.rope_scaling);
  TransformerDecoder::Layers layers;
  layers.reserve(c.num_layers);
  const int64_t f = c.intermediate_dim;
  const bool mlp = lora.apply_lora_to_mlp;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    MultiHeadAttentionArgs a;
    a.embed_dim = d;
    a.num_heads = n_h;
    a.num_kv_heads = n_kv;
    a.head_dim = h_d;
    a.q_proj = proj(wants("q_proj"), d, n_h * h_d, c.qkv_bias);
    a.k_proj = proj(wants("k_proj"), d, n_kv * h_d, c.qkv_bias);
    a.v_proj = proj(wants("v_proj"), d, n_kv * h_d, c.qkv_bias);
    a.output_proj = proj(wants("output_proj"), n_h * h_d, d, false);
    a.pos_embeddings = rope;
    a.max_seq_len = c.max_seq_len;
    a.is_causal = true;
    CCTUNE_ASSIGN_OR_RETURN(auto attn, MultiHeadAttention::Create(std::move(a)));
    CCTUNE_ASSIGN_OR_RETURN(auto ff, FeedForward::Create(proj(mlp, d, f, false),
                                                         proj(mlp, f, d, false),
                                                         proj(mlp, d, f, false)));
    CCTUNE_ASSIGN_OR_RETURN(
        auto layer, TransformerSelfAttentionLayer::Create(
                        std::move(attn), std::move(ff), std::make_unique<RMSNorm>(d, c.norm_eps),
                        std::make_unique<RMSNorm>(d, c.norm_eps)));
    layers.push_back(std::move(layer));
  }
  auto tok_embeddings = std::make_unique<Embedding>(c.vocab_size, d);
  std::unique_ptr<Projection> output;
  if (c.tie_word_embeddings) {
    output = std::make_unique<TiedLinear>(tok_embeddings.get());
  } else {
    output = proj(lora.apply_lora_to_output, d, c.vocab_size, false);
  }
  return TransformerDecoder::Create(std::move(tok_embeddings), std::move(layers),
                                    std::make_unique<RMSNorm>(d, c.norm_eps), std::move(output),
                                    c.max_seq_len);
}

DecoderConfig Llama3_2_1BConfig() {
  DecoderConfig c;
  c.vocab_size = 128256;
  c.num_layers = 16;
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.embed_dim = 2048;
  c.max_seq_len = 131072;
  c.intermediate_dim = 8192;
  c.norm_eps = 1e-5f;
  c.rope_base = 500000.0;
  ops::RopeScaling scaling;
  scaling.factor = 32.0;
  c.rope_scaling = scaling;
  c.tie_word_embeddings = true;
  return c;
}

DecoderConfig Llama3_1_8BConfig() {
  DecoderConfig c;
  c.vocab_size = 128256;
  c.num_layers = 32;
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.embed_dim = 4096;
  c.max_seq_len = 131072;
  c.intermediate_dim = 14336;
  c.norm_eps = 1e-5f;
  c.rope_base = 500000.0;
  c.rope_scaling = ops::RopeScaling();  // factor 8, as llama3_1
  return c;
}

DecoderConfig Llama2_7BConfig() {
  DecoderConfig c;
  c.vocab_size = 32000;
  c.num_layers = 32;
  c.num_heads = 32;
  c.num_kv_heads = 32;
  c.embed_dim = 4096;
  c.max_seq_len = 4096;
  c.intermediate_dim = ScaleHiddenDimForMlp(4096);
  c.norm_eps = 1e-5f;
  c.rope_base = 10000.0;
  return c;
}

DecoderConfig Qwen2_5_0_5BConfig() {
  DecoderConfig c;
  c.vocab_size = 151936;
  c.num_layers = 24;
  c.num_heads = 14;
  c.num_kv_heads = 2;
  c.embed_dim = 896;
  c.intermediate_dim = 4864;
  c.max_seq_len = 32768;
  c.norm_eps = 1e-6f;
  c.rope_base = 1000000.0;
  c.rope_pairing = ops::RopePairing::kHalfSplit;
  c.qkv_bias = true;
  c.tie_word_embeddings = true;
  return c;
}

absl::StatusOr<std::unique_ptr<TransformerDecoder>> LoRALlama3_2_1B(const LoRAOptions& lora) {
  return BuildLoRADecoder(Llama3_2_1BConfig(), lora);
}
absl::StatusOr<std::unique_ptr<TransformerDecoder>> LoRALlama3_1_8B(const LoRAOptions& lora) {
  return BuildLoRADecoder(Llama3_1_8BConfig(), lora);
}
absl::StatusOr<std::unique_ptr<TransformerDecoder>> LoRALlama2_7B(const LoRAOptions& lora) {
  return BuildLoRADecoder(Llama2_7BConfig(), lora);
}
absl::StatusOr<std::unique_ptr<TransformerDecoder>> LoRAQwen2_5_0_5B(const LoRAOptions& lora) {
  return BuildLoRADecoder(Qwen2_5_0_5BConfig(), lora);
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
      return absl::InvalidArgumentError(absl::StrCat("LoRAParamBuffers: ", name, " is ",
                                                     ShapeToString(p.shape()),
                                                     " but its gradient is ",
                                                     ShapeToString(g.shape())));
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

namespace {

absl::StatusOr<LoRAOptions> ParseLoRAArgs(const ModelArgs& args, absl::string_view builder) {
  LoRAOptions o;
  auto it = args.find("lora_attn_modules");
  if (it == args.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(builder, ": lora_attn_modules is required (e.g. \"q_proj,v_proj\")"));
  }
  o.lora_attn_modules.clear();
  for (absl::string_view part : absl::StrSplit(it->second, absl::ByAnyChar(",[] '\""),
                                               absl::SkipEmpty())) {
    o.lora_attn_modules.emplace_back(absl::StripAsciiWhitespace(part));
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

}  // namespace

absl::Status RegisterLoRABuilders(ModelRegistry& registry) {
  struct Entry {
    const char* family;
    const char* builder;
    DecoderConfig (*config)();
  };
  const Entry entries[] = {
      {"llama3_2", "lora_llama3_2_1b", &Llama3_2_1BConfig},
      {"llama3_1", "lora_llama3_1_8b", &Llama3_1_8BConfig},
      {"llama2", "lora_llama2_7b", &Llama2_7BConfig},
      {"qwen2_5", "lora_qwen2_5_0_5b", &Qwen2_5_0_5BConfig},
  };
  for (const Entry& e : entries) {
    const std::string name = absl::StrCat("cctune.models.", e.family, ".", e.builder);
    if (registry.Find(name).ok()) continue;
    ModelBuilderInfo info;
    info.name = name;
    info.args = {"lora_attn_modules", "apply_lora_to_mlp", "apply_lora_to_output",
                 "lora_rank",         "lora_alpha",        "lora_dropout"};
    info.required_args = {"lora_attn_modules"};
    info.description = absl::StrCat("LoRA ", e.builder, " (torchtune's ", e.builder, ")");
    const std::string builder = e.builder;
    DecoderConfig (*config)() = e.config;
    info.build = [builder, config](const ModelArgs& args)
        -> absl::StatusOr<std::unique_ptr<TransformerDecoder>> {
      CCTUNE_ASSIGN_OR_RETURN(LoRAOptions o, ParseLoRAArgs(args, builder));
      return BuildLoRADecoder(config(), o);
    };
    CCTUNE_RETURN_IF_ERROR(registry.Register(std::move(info)));
  }
  return absl::OkStatus();
}

}  // namespace cctune
