#include "models/model_builder.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "config/validate.h"
#include "config/yaml_loader.h"
#include "core/status.h"

namespace cctune {

namespace {

// What reading the arguments accumulates: the config, and the three bias flags (torchtune
// sets them one by one; BuildDecoder has one flag for the three).
struct Pending {
  DecoderConfig c;
  bool bias[3] = {false, false, false};
  bool bias_given = false;
};

struct DecoderArg {
  const char* key;
  KeyType type;
  const char* doc;
  // The default a builder with base config `c` shows.
  std::function<ConfigNode(const DecoderConfig& c)> default_of;
  std::function<absl::Status(const ConfigNode& v, Pending& p)> apply;
};

// A size: an int field of DecoderConfig in [1, max].
DecoderArg SizeArg(const char* key, int64_t max, const char* doc, int64_t DecoderConfig::*field) {
  return {key, KeyType::Int().InRange(1, static_cast<double>(max)), doc,
          [field](const DecoderConfig& c) { return ConfigNode::Int(c.*field); },
          [field](const ConfigNode& v, Pending& p) {
            p.c.*field = v.int_value();
            return absl::OkStatus();
          }};
}

absl::Status Unsupported(const ConfigNode& v, absl::string_view key, absl::string_view what) {
  return absl::UnimplementedError(
      absl::StrCat(key, " = ", v.text().empty() ? v.Describe() : v.text(), ": ", what));
}

absl::Status SetBias(const ConfigNode& v, Pending& p, int i) {
  if (!p.bias_given) std::fill(std::begin(p.bias), std::end(p.bias), p.c.qkv_bias);
  p.bias_given = true;
  p.bias[i] = v.bool_value();
  return absl::OkStatus();
}

ConfigNode DefaultBias(const DecoderConfig& c) { return ConfigNode::Bool(c.qkv_bias); }

const std::vector<DecoderArg>& DecoderArgs() {
  static const auto* const args = new std::vector<DecoderArg>{
      SizeArg("vocab_size", kMaxDecoderVocabSize, "number of tokens", &DecoderConfig::vocab_size),
      SizeArg("num_layers", kMaxDecoderLayers, "transformer layers", &DecoderConfig::num_layers),
      SizeArg("num_heads", kMaxDecoderHeads, "query heads", &DecoderConfig::num_heads),
      SizeArg("num_kv_heads", kMaxDecoderHeads,
              "key/value heads (GQA; = num_heads for MHA, 1 for MQA)",
              &DecoderConfig::num_kv_heads),
      SizeArg("embed_dim", kMaxDecoderWidth, "model width", &DecoderConfig::embed_dim),
      SizeArg("max_seq_len", kMaxDecoderSeqLen, "context length (RoPE table, KV cache)",
              &DecoderConfig::max_seq_len),
      {"intermediate_dim", KeyType::Int().InRange(1, kMaxDecoderWidth).OrNull(),
       "SwiGLU hidden size (null: torchtune's scale_hidden_dim_for_mlp(embed_dim))",
       [](const DecoderConfig& c) {
         return c.intermediate_dim > 0 ? ConfigNode::Int(c.intermediate_dim) : ConfigNode::Null();
       },
       [](const ConfigNode& v, Pending& p) {
         p.c.intermediate_dim = v.IsNull() ? 0 : v.int_value();
         return absl::OkStatus();
       }},
      {"attn_dropout", KeyType::Float().InRange(0, 1), "attention dropout (only 0.0)",
       [](const DecoderConfig&) { return ConfigNode::Float(0.0); },
       [](const ConfigNode& v, Pending&) {
         if (v.float_value() == 0.0) return absl::OkStatus();
         return Unsupported(v, "attn_dropout", "attention dropout is not implemented; use 0.0");
       }},
      {"norm_eps", KeyType::Float().GreaterThan(0), "RMSNorm epsilon",
       [](const DecoderConfig& c) { return ConfigNode::Float(c.norm_eps); },
       [](const ConfigNode& v, Pending& p) {
         p.c.norm_eps = static_cast<float>(v.float_value());
         return absl::OkStatus();
       }},
      {"rope_base", KeyType::Float().GreaterThan(0), "RoPE base period",
       [](const DecoderConfig& c) { return ConfigNode::Float(c.rope_base); },
       [](const ConfigNode& v, Pending& p) {
         p.c.rope_base = v.float_value();
         return absl::OkStatus();
       }},
      {"scale_factor", KeyType::Float().GreaterThan(0), "Llama 3.1 RoPE scaling factor",
       [](const DecoderConfig& c) {
         return ConfigNode::Float(c.rope_scaling.has_value() ? c.rope_scaling->factor : 1.0);
       },
       [](const ConfigNode& v, Pending& p) {
         if (!p.c.rope_scaling.has_value()) p.c.rope_scaling = ops::RopeScaling();
         p.c.rope_scaling->factor = v.float_value();
         return absl::OkStatus();
       }},
      {"tie_word_embeddings", KeyType::Bool(), "output projection = token embedding",
       [](const DecoderConfig& c) { return ConfigNode::Bool(c.tie_word_embeddings); },
       [](const ConfigNode& v, Pending& p) {
         p.c.tie_word_embeddings = v.bool_value();
         return absl::OkStatus();
       }},
      {"q_proj_bias", KeyType::Bool(), "bias on q_proj (k/v the same)", &DefaultBias,
       [](const ConfigNode& v, Pending& p) { return SetBias(v, p, 0); }},
      {"k_proj_bias", KeyType::Bool(), "bias on k_proj (q/v the same)", &DefaultBias,
       [](const ConfigNode& v, Pending& p) { return SetBias(v, p, 1); }},
      {"v_proj_bias", KeyType::Bool(), "bias on v_proj (q/k the same)", &DefaultBias,
       [](const ConfigNode& v, Pending& p) { return SetBias(v, p, 2); }},
      {"rope_pairing", KeyType::Enum({"interleaved", "half_split"}),
       "RoPE pairs: (2i, 2i+1), or (i, i + head_dim/2) as Hugging Face's layout",
       [](const DecoderConfig& c) {
         return ConfigNode::String(c.rope_pairing == ops::RopePairing::kHalfSplit ? "half_split"
                                                                                  : "interleaved");
       },
       [](const ConfigNode& v, Pending& p) {
         p.c.rope_pairing = v.string_value() == "half_split" ? ops::RopePairing::kHalfSplit
                                                             : ops::RopePairing::kInterleaved;
         return absl::OkStatus();
       }},
      {"q_norm", KeyType::Bool(), "RMSNorm on queries (only false)",
       [](const DecoderConfig&) { return ConfigNode::Bool(false); },
       [](const ConfigNode& v, Pending&) {
         if (!v.bool_value()) return absl::OkStatus();
         return Unsupported(v, "q_norm", "query normalisation is not implemented");
       }},
      {"k_norm", KeyType::Bool(), "RMSNorm on keys (only false)",
       [](const DecoderConfig&) { return ConfigNode::Bool(false); },
       [](const ConfigNode& v, Pending&) {
         if (!v.bool_value()) return absl::OkStatus();
         return Unsupported(v, "k_norm", "key normalisation is not implemented");
       }},
  };
  return *args;
}

const DecoderArg* FindDecoderArg(absl::string_view key) {
  for (const DecoderArg& a : DecoderArgs()) {
    if (a.key == key) return &a;
  }
  return nullptr;
}

// Adds `keys` to `schema`: required ones, or ones defaulting to `base`'s values.
absl::Status AddDecoderArgs(Schema& schema, const std::vector<std::string>& keys, bool required,
                            const DecoderConfig& base) {
  for (const std::string& key : keys) {
    const DecoderArg* a = FindDecoderArg(key);
    if (a == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("model builder '", schema.name(), "': no decoder argument '", key, "'"));
    }
    if (required) {
      schema.Required(key, a->type, a->doc);
    } else {
      schema.Default(key, a->type, a->default_of(base), a->doc);
    }
  }
  return absl::OkStatus();
}

// `base` with the arguments of `keys` the node (or the checkpoint) gives written over it.
absl::StatusOr<DecoderConfig> ReadDecoderArgs(const ConfigNode& node,
                                              const ConfigNode& from_checkpoint,
                                              const std::vector<std::string>& keys,
                                              const DecoderConfig& base) {
  Pending p;
  p.c = base;
  for (const std::string& key : keys) {
    const ConfigNode* v = BuilderArg(node, from_checkpoint, key);
    if (v == nullptr) continue;
    const DecoderArg* a = FindDecoderArg(key);
    CCTUNE_CHECK(a != nullptr, "decoder argument vanished");
    CCTUNE_RETURN_IF_ERROR(a->apply(*v, p));
  }
  if (p.bias_given) {
    if (p.bias[0] != p.bias[1] || p.bias[1] != p.bias[2]) {
      return absl::UnimplementedError(absl::StrCat(
          "q_proj_bias = ", p.bias[0], ", k_proj_bias = ", p.bias[1], ", v_proj_bias = ", p.bias[2],
          ": biases on some of q/k/v only are not implemented (set all three alike)"));
    }
    p.c.qkv_bias = p.bias[0];
  }
  if (p.c.intermediate_dim == 0 && p.c.embed_dim > 0) {
    p.c.intermediate_dim = ScaleHiddenDimForMlp(p.c.embed_dim);
  }
  return p.c;
}

std::string BuilderName(absl::string_view module, absl::string_view builder) {
  return absl::StrCat("cctune.models.", module, ".", builder);
}

absl::Status CheckAttnModules(const ConfigNode& v) {
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "lora_attn_modules must be a list of q_proj, k_proj, v_proj, output_proj, got ",
        v.Describe()));
  };
  if (v.kind() == ConfigNode::Kind::kString) return absl::OkStatus();
  if (!v.IsList()) return bad();
  for (const ConfigNode& item : v.items()) {
    if (item.kind() != ConfigNode::Kind::kString) return bad();
  }
  return absl::OkStatus();
}

void AddLoRAArgs(Schema& schema, bool attn_modules_required, bool quantize_base_default) {
  const char* modules_doc = "which of q_proj, k_proj, v_proj, output_proj get adapters";
  if (attn_modules_required) {
    schema.Required("lora_attn_modules", KeyType::Any(), modules_doc);
  } else {
    schema.Default("lora_attn_modules", KeyType::Any(),
                   ConfigNode::List({ConfigNode::String("q_proj"), ConfigNode::String("v_proj")}),
                   modules_doc);
  }
  schema.Check("lora_attn_modules", &CheckAttnModules)
      .Default("apply_lora_to_mlp", KeyType::Bool(), ConfigNode::Bool(false),
               "adapters on w1, w2, w3")
      .Default("apply_lora_to_output", KeyType::Bool(), ConfigNode::Bool(false),
               "an adapter on the final projection (not with tied embeddings)")
      .Default("lora_rank", KeyType::Int().InRange(1, kMaxDecoderWidth), ConfigNode::Int(8),
               "adapter rank")
      .Default("lora_alpha", KeyType::Float(), ConfigNode::Float(16.0),
               "adapter scale numerator (scale = alpha / rank)")
      .Default("lora_dropout", KeyType::Float().InRange(0, 1), ConfigNode::Float(0.0),
               "dropout on each adapter's input in training")
      .Default("use_dora", KeyType::Bool(), ConfigNode::Bool(false), "DoRA (only false)")
      .Default("quantize_base", KeyType::Bool(), ConfigNode::Bool(quantize_base_default),
               "QLoRA: the frozen base projections in NF4 (torchao's to_nf4)");
}

}  // namespace

ModelComponentRegistryT& ModelComponentRegistry() {
  static ModelComponentRegistryT* const r = new ModelComponentRegistryT("model");
  return *r;
}

const ConfigNode* BuilderArg(const ConfigNode& node, const ConfigNode& from_checkpoint,
                             absl::string_view key) {
  const ConfigNode* v = node.IsMap() ? node.Child(key) : nullptr;
  if (v != nullptr && !v->IsNull()) return v;
  const ConfigNode* c = from_checkpoint.IsMap() ? from_checkpoint.Child(key) : nullptr;
  if (c != nullptr && !c->IsNull()) return c;
  return v;  // null or absent
}

bool IsDecoderArg(absl::string_view key) { return FindDecoderArg(key) != nullptr; }

absl::StatusOr<LoRAOptions> ReadLoRAOptions(const ConfigNode& node) {
  LoRAOptions o;
  CCTUNE_ASSIGN_OR_RETURN(const ConfigNode* modules, node.Get("lora_attn_modules"));
  o.lora_attn_modules.clear();
  if (modules->IsList()) {
    for (const ConfigNode& item : modules->items()) o.lora_attn_modules.push_back(item.text());
  } else {  // "q_proj,v_proj" or "['q_proj', 'v_proj']", as a command line may spell it
    for (absl::string_view part :
         absl::StrSplit(modules->string_value(), absl::ByAnyChar(",[] '\""), absl::SkipEmpty())) {
      o.lora_attn_modules.emplace_back(part);
    }
  }
  CCTUNE_ASSIGN_OR_RETURN(o.apply_lora_to_mlp, node.GetBool("apply_lora_to_mlp"));
  CCTUNE_ASSIGN_OR_RETURN(o.apply_lora_to_output, node.GetBool("apply_lora_to_output"));
  CCTUNE_ASSIGN_OR_RETURN(o.lora_rank, node.GetAs<int64_t>("lora_rank"));
  CCTUNE_ASSIGN_OR_RETURN(o.lora_alpha, node.GetFloat("lora_alpha"));
  CCTUNE_ASSIGN_OR_RETURN(o.lora_dropout, node.GetFloat("lora_dropout"));
  CCTUNE_ASSIGN_OR_RETURN(o.quantize_base, node.GetBool("quantize_base"));
  CCTUNE_ASSIGN_OR_RETURN(const bool dora, node.GetBool("use_dora"));
  if (dora) {
    return absl::UnimplementedError("use_dora = true: DoRA is not implemented; set it to false");
  }
  return o;
}

namespace {

// Every registered builder's DecoderConfigFn, for ModelConfig.
struct ConfigFns {
  absl::Mutex mu;
  std::map<std::string, DecoderConfigFn> fns ABSL_GUARDED_BY(mu);
};
ConfigFns& RegisteredConfigFns() {
  static ConfigFns* const fns = new ConfigFns;
  return *fns;
}

void RememberConfigFn(const std::string& name, DecoderConfigFn make) {
  ConfigFns& r = RegisteredConfigFns();
  absl::MutexLock lock(&r.mu);
  r.fns.emplace(name, std::move(make));
}

}  // namespace

absl::Status RegisterModelBuilder(std::string name, Schema schema, DecoderConfigFn make) {
  schema.set_name(name);
  RememberConfigFn(name, make);
  return ModelComponentRegistry().Register(
      std::move(name), std::move(schema),
      [make = std::move(make)](const ConfigNode& node, const ConfigNode& from_checkpoint)
          -> absl::StatusOr<std::unique_ptr<TransformerDecoder>> {
        CCTUNE_ASSIGN_OR_RETURN(DecoderConfig c, make(node, from_checkpoint));
        return BuildDecoder(c);
      });
}

absl::Status RegisterLoRAModelBuilder(std::string name, Schema schema, DecoderConfigFn make,
                                      bool attn_modules_required, bool quantize_base_default) {
  schema.set_name(name);
  AddLoRAArgs(schema, attn_modules_required, quantize_base_default);
  RememberConfigFn(name, make);
  return ModelComponentRegistry().Register(
      std::move(name), std::move(schema),
      [make = std::move(make)](const ConfigNode& node, const ConfigNode& from_checkpoint)
          -> absl::StatusOr<std::unique_ptr<TransformerDecoder>> {
        CCTUNE_ASSIGN_OR_RETURN(LoRAOptions lora, ReadLoRAOptions(node));
        CCTUNE_ASSIGN_OR_RETURN(DecoderConfig c, make(node, from_checkpoint));
        return BuildLoRADecoder(c, lora);
      });
}

absl::Status RegisterModelFamily(const ModelFamily& family) {
  // One builder with its arguments: the component builder or a model builder.
  auto add = [&](const std::string& module, const std::string& builder, const std::string& doc,
                 const std::vector<std::string>& required, const std::vector<std::string>& optional,
                 const DecoderConfig& base, bool qlora) -> absl::Status {
    Schema schema(BuilderName(module, builder), doc);
    CCTUNE_RETURN_IF_ERROR(AddDecoderArgs(schema, required, /*required=*/true, base));
    CCTUNE_RETURN_IF_ERROR(AddDecoderArgs(schema, optional, /*required=*/false, base));
    std::vector<std::string> keys = required;
    keys.insert(keys.end(), optional.begin(), optional.end());
    DecoderConfigFn make = [keys, base](const ConfigNode& node, const ConfigNode& ckpt) {
      return ReadDecoderArgs(node, ckpt, keys, base);
    };
    CCTUNE_RETURN_IF_ERROR(RegisterModelBuilder(BuilderName(module, builder), schema, make));
    if (qlora) {  // torchtune's partial(lora_<builder>, quantize_base=True)
      CCTUNE_RETURN_IF_ERROR(RegisterLoRAModelBuilder(BuilderName(module, "qlora_" + builder),
                                                      schema, make,
                                                      family.lora_attn_modules_required,
                                                      /*quantize_base_default=*/true));
    }
    return RegisterLoRAModelBuilder(BuilderName(module, "lora_" + builder), schema, std::move(make),
                                    family.lora_attn_modules_required);
  };
  if (!family.component.empty()) {
    CCTUNE_RETURN_IF_ERROR(add(family.component, family.component,
                               absl::StrCat(family.doc, " (component builder)"),
                               family.required_args, family.optional_args, family.defaults,
                               /*qlora=*/false));
  }
  for (const ModelPreset& m : family.models) {
    CCTUNE_RETURN_IF_ERROR(add(family.name, m.name, m.doc, {}, m.args, m.config, m.qlora));
  }
  return absl::OkStatus();
}

absl::StatusOr<DecoderConfig> ModelConfig(absl::string_view name, const ConfigNode& args,
                                          const ConfigNode& from_checkpoint) {
  ConfigNode node = args.IsMap() ? args : ConfigNode::Map();
  node.Set("_component_", ConfigNode::String(std::string(name)));
  const ModelComponentRegistryT& registry = ModelComponentRegistry();
  std::vector<ConfigError> errors;
  CheckComponent(node, registry.kind(), registry.catalog(), &errors);
  CCTUNE_RETURN_IF_ERROR(ErrorsToStatus(errors));
  const std::optional<ComponentInfo> info = registry.catalog().Find(name);
  CCTUNE_CHECK(info.has_value(), "component vanished after checking");
  DecoderConfigFn make;
  {
    ConfigFns& r = RegisteredConfigFns();
    absl::MutexLock lock(&r.mu);
    auto it = r.fns.find(info->name);
    if (it == r.fns.end()) {
      return absl::NotFoundError(absl::StrCat("'", name, "' is not a decoder builder"));
    }
    make = it->second;
  }
  return make(WithDefaults(node, *info->schema), from_checkpoint);
}

namespace {

// `entries` of a family file checked as decoder arguments (of `allowed` when given).
absl::Status CheckDecoderArgs(const ConfigNode& map, const std::vector<std::string>* allowed) {
  for (const auto& [key, value] : map.entries()) {
    const DecoderArg* a = FindDecoderArg(key);
    if (a == nullptr || (allowed != nullptr &&
                         std::find(allowed->begin(), allowed->end(), key) == allowed->end())) {
      std::vector<std::string> names;
      if (allowed != nullptr) {
        names = *allowed;
      } else {
        for (const DecoderArg& d : DecoderArgs()) names.push_back(d.key);
      }
      return value.Error(absl::StrCat(
          "'", key, "' is not an argument here; accepted: ", absl::StrJoin(names, ", ")));
    }
    std::string wrong = a->type.Mismatch(value);
    if (wrong.empty()) wrong = a->type.RangeMismatch(value);
    if (!wrong.empty()) return value.Error(absl::StrCat("'", key, "': ", wrong));
  }
  return absl::OkStatus();
}

// `base` with the entries of `maps` applied, later maps winning.
absl::StatusOr<DecoderConfig> ApplyArgs(const std::vector<const ConfigNode*>& maps) {
  ConfigNode merged = ConfigNode::Map();
  for (const ConfigNode* m : maps) {
    for (const auto& [key, value] : m->entries()) merged.Set(key, value);
  }
  return ReadDecoderArgs(merged, ConfigNode(), merged.Keys(), DecoderConfig());
}

const Schema& FamilySchema() {
  static const Schema* const schema = [] {
    auto* s = new Schema("model family", "models/<family>/<family>.yaml");
    s->Required("family", KeyType::String(), "module of the model builders")
        .Optional("component", KeyType::String(), "the component builder's name and module")
        .Required("doc", KeyType::String(), "one line")
        .Required("required", KeyType::List(KeyType::String()),
                  "component builder arguments without a default")
        .Default("defaults", KeyType::Map(), ConfigNode::Map(),
                 "component builder arguments with their defaults")
        .Default("fixed", KeyType::Map(), ConfigNode::Map(), "what no argument sets")
        .Required("models", KeyType::Map(), "model builders");
    return s;
  }();
  return *schema;
}

const Schema& PresetSchema() {
  static const Schema* const schema = [] {
    auto* s = new Schema("model builder", "an entry of a family file's models");
    s->Required("doc", KeyType::String(), "one line")
        .Required("call", KeyType::Map(), "the component builder's arguments")
        .Default("args", KeyType::List(KeyType::String()), ConfigNode::List(),
                 "arguments the model builder takes")
        .Optional("published",
                  KeyType::Object(Schema("published", "counts to test the builder against")
                                      .Required("parameters", KeyType::Int().AtLeast(1), "")
                                      .Required("tensors", KeyType::Int().AtLeast(1), "")),
                  "what the publisher or torchtune counts")
        .Default("qlora", KeyType::Bool(), ConfigNode::Bool(false),
                 "torchtune has a qlora_ twin (lora_ with quantize_base=True)");
    return s;
  }();
  return *schema;
}

absl::Status CheckNode(const ConfigNode& node, const Schema& schema) {
  std::vector<ConfigError> errors;
  CheckAgainstSchema(node, schema, ComponentCatalog::Global(), &errors);
  return ErrorsToStatus(errors);
}

}  // namespace

absl::StatusOr<ModelFamily> ParseModelFamily(absl::string_view yaml, const std::string& file) {
  CCTUNE_ASSIGN_OR_RETURN(const ConfigNode raw, LoadYamlString(yaml, file));
  CCTUNE_RETURN_IF_ERROR(CheckNode(raw, FamilySchema()));
  const ConfigNode root = WithDefaults(raw, FamilySchema());
  ModelFamily f;
  f.name = root.Child("family")->string_value();
  if (const ConfigNode* c = root.Child("component")) f.component = c->string_value();
  f.doc = root.Child("doc")->string_value();
  const ConfigNode& defaults = *root.Child("defaults");
  const ConfigNode& fixed = *root.Child("fixed");
  for (const ConfigNode& r : root.Child("required")->items()) {
    if (FindDecoderArg(r.string_value()) == nullptr) {
      return r.Error(absl::StrCat("'", r.string_value(), "' is not a decoder argument"));
    }
    f.required_args.push_back(r.string_value());
  }
  CCTUNE_RETURN_IF_ERROR(CheckDecoderArgs(defaults, nullptr));
  CCTUNE_RETURN_IF_ERROR(CheckDecoderArgs(fixed, nullptr));
  f.optional_args = defaults.Keys();
  CCTUNE_ASSIGN_OR_RETURN(f.defaults, ApplyArgs({&fixed, &defaults}));
  std::vector<std::string> all = f.required_args;
  all.insert(all.end(), f.optional_args.begin(), f.optional_args.end());
  for (const auto& [name, entry] : root.Child("models")->entries()) {
    CCTUNE_RETURN_IF_ERROR(CheckNode(entry, PresetSchema()));
    const ConfigNode preset = WithDefaults(entry, PresetSchema());
    const ConfigNode& call = *preset.Child("call");
    CCTUNE_RETURN_IF_ERROR(CheckDecoderArgs(call, &all));
    for (const std::string& r : f.required_args) {
      if (call.Child(r) == nullptr) {
        return call.Error(absl::StrCat("model builder '", name, "' must give '", r, "'"));
      }
    }
    ModelPreset m;
    m.name = name;
    m.doc = preset.Child("doc")->string_value();
    CCTUNE_ASSIGN_OR_RETURN(m.config, ApplyArgs({&fixed, &defaults, &call}));
    for (const ConfigNode& a : preset.Child("args")->items()) {
      if (std::find(all.begin(), all.end(), a.string_value()) == all.end()) {
        return a.Error(absl::StrCat("'", a.string_value(), "' is not an argument of ",
                                    f.component.empty() ? f.name : f.component));
      }
      m.args.push_back(a.string_value());
    }
    if (const ConfigNode* p = preset.Child("published")) {
      m.published_parameters = p->Child("parameters")->int_value();
      m.published_tensors = p->Child("tensors")->int_value();
    }
    m.qlora = preset.Child("qlora")->bool_value();
    f.models.push_back(std::move(m));
  }
  return f;
}

}  // namespace cctune
