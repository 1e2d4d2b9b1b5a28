#include "checkpoint/peft.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "checkpoint/atomic_file.h"
#include "checkpoint/safetensors.h"
#include "core/status.h"
#include "nlohmann/json.hpp"

namespace cctune {

namespace {

using Json = nlohmann::json;

constexpr absl::string_view kPeftPrefix = "base_model.model.";

const std::map<std::string, std::string>& TargetModuleMap() {
  static const auto* m = new std::map<std::string, std::string>{
      {"q_proj", "q_proj"}, {"k_proj", "k_proj"},    {"v_proj", "v_proj"},
      {"output_proj", "o_proj"}, {"w1", "gate_proj"}, {"w2", "down_proj"},
      {"w3", "up_proj"},    {"output", "lm_head"},
  };
  return *m;
}

// "layers.0.attn.q_proj.lora_a.weight" -> ("layers.0.attn.q_proj", 'a'); false otherwise.
bool SplitAdapterName(absl::string_view name, std::string* module, char* which) {
  for (const char w : {'a', 'b'}) {
    const std::string suffix = absl::StrCat(".lora_", std::string(1, w), ".weight");
    if (absl::EndsWith(name, suffix)) {
      *module = std::string(name.substr(0, name.size() - suffix.size()));
      *which = w;
      return true;
    }
  }
  return false;
}

struct Heads {
  int64_t n_h, n_kv, h_d;
};

absl::StatusOr<Heads> HeadsOf(const HfModelConfig& c) {
  Heads h;
  h.n_h = c.num_attention_heads;
  h.n_kv = c.num_key_value_heads > 0 ? c.num_key_value_heads : c.num_attention_heads;
  if (h.n_h <= 0 || (c.head_dim <= 0 && c.hidden_size <= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("PEFT: the model config needs num_attention_heads (", c.num_attention_heads,
                     ") and hidden_size (", c.hidden_size, ") or head_dim (", c.head_dim, ")"));
  }
  h.h_d = c.head_dim > 0 ? c.head_dim : c.hidden_size / c.num_attention_heads;
  return h;
}

// The number of heads whose rows a q/k lora_B holds, or 0 for other modules.
int64_t QkHeads(absl::string_view tune_module, const Heads& h) {
  if (absl::EndsWith(tune_module, "attn.q_proj")) return h.n_h;
  if (absl::EndsWith(tune_module, "attn.k_proj")) return h.n_kv;
  return 0;
}

}  // namespace

absl::StatusOr<std::string> TuneToPeftTargetModule(absl::string_view tune_module) {
  auto it = TargetModuleMap().find(std::string(tune_module));
  if (it == TargetModuleMap().end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PEFT: unknown target module '", tune_module,
        "' (expected q_proj, k_proj, v_proj, output_proj, w1, w2, w3 or output)"));
  }
  return it->second;
}

std::vector<std::string> LoRATargetModules(const StateDict& adapters) {
  std::set<std::string> out;
  for (const auto& [name, t] : adapters) {
    std::string module;
    char which;
    if (!SplitAdapterName(name, &module, &which)) continue;
    const size_t dot = module.rfind('.');
    out.insert(dot == std::string::npos ? module : module.substr(dot + 1));
  }
  return {out.begin(), out.end()};
}

absl::StatusOr<StateDict> TuneToPeftAdapterWeights(const StateDict& adapters,
                                                   const HfModelConfig& config,
                                                   const PeftOptions& options) {
  CCTUNE_ASSIGN_OR_RETURN(Heads heads, HeadsOf(config));
  StateDict out;
  for (const auto& [name, t] : adapters) {
    std::string module;
    char which;
    if (!SplitAdapterName(name, &module, &which)) continue;
    absl::StatusOr<std::string> hf = TuneToHfName(module + ".weight");
    if (!hf.ok()) {
      return absl::NotFoundError(
          absl::StrCat("PEFT: no Hugging Face name for adapter ", name, ": ", hf.status().message()));
    }
    const std::string base = hf->substr(0, hf->size() - std::string(".weight").size());
    const std::string peft_name =
        absl::StrCat(kPeftPrefix, base, which == 'a' ? ".lora_A.weight" : ".lora_B.weight");
    Tensor value = t;
    const int64_t n = QkHeads(module, heads);
    if (options.permute_qk && which == 'b' && n > 0) {
      if (t.dim() != 2 || t.size(0) != n * heads.h_d) {
        return absl::InvalidArgumentError(absl::StrCat("PEFT: ", name, " has shape ",
                                                       ShapeToString(t.shape()), ", expected [",
                                                       n * heads.h_d, ", rank]"));
      }
      CCTUNE_ASSIGN_OR_RETURN(value, PermuteInterleavedToHf(t, n, heads.h_d));
    }
    out.emplace(peft_name, std::move(value));
  }
  return out;
}

absl::StatusOr<StateDict> PeftToTuneAdapterWeights(const StateDict& peft,
                                                   const HfModelConfig& config,
                                                   const PeftOptions& options) {
  CCTUNE_ASSIGN_OR_RETURN(Heads heads, HeadsOf(config));
  StateDict out;
  for (const auto& [name, t] : peft) {
    absl::string_view rest = name;
    if (!absl::ConsumePrefix(&rest, kPeftPrefix)) {
      return absl::InvalidArgumentError(
          absl::StrCat("PEFT: tensor ", name, " does not start with '", kPeftPrefix, "'"));
    }
    char which;
    if (absl::ConsumeSuffix(&rest, ".lora_A.weight")) {
      which = 'a';
    } else if (absl::ConsumeSuffix(&rest, ".lora_B.weight")) {
      which = 'b';
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("PEFT: tensor ", name, " is not a lora_A/lora_B weight"));
    }
    CCTUNE_ASSIGN_OR_RETURN(std::string tune, HfToTuneName(absl::StrCat(rest, ".weight")));
    if (tune.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("PEFT: tensor ", name, " maps to nothing"));
    }
    const std::string module = tune.substr(0, tune.size() - std::string(".weight").size());
    Tensor value = t;
    const int64_t n = QkHeads(module, heads);
    if (options.permute_qk && which == 'b' && n > 0) {
      if (t.dim() != 2 || t.size(0) != n * heads.h_d) {
        return absl::InvalidArgumentError(absl::StrCat("PEFT: ", name, " has shape ",
                                                       ShapeToString(t.shape()), ", expected [",
                                                       n * heads.h_d, ", rank]"));
      }
      CCTUNE_ASSIGN_OR_RETURN(value, PermuteHfToInterleaved(t, n, heads.h_d));
    }
    out.emplace(absl::StrCat(module, which == 'a' ? ".lora_a.weight" : ".lora_b.weight"),
                std::move(value));
  }
  return out;
}

absl::StatusOr<std::string> PeftAdapterConfigJson(const PeftAdapterConfig& config) {
  if (config.r <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("PEFT: r (", config.r, ") must be positive"));
  }
  Json targets = Json::array();
  for (const std::string& m : config.target_modules) {
    CCTUNE_ASSIGN_OR_RETURN(std::string peft, TuneToPeftTargetModule(m));
    targets.push_back(peft);
  }
  Json j;
  j["peft_type"] = "LORA";
  j["task_type"] = "CAUSAL_LM";
  j["r"] = config.r;
  j["lora_alpha"] = config.lora_alpha;
  j["lora_dropout"] = config.lora_dropout;
  j["target_modules"] = targets;
  j["bias"] = "none";
  j["fan_in_fan_out"] = false;
  j["inference_mode"] = true;
  if (!config.base_model_name_or_path.empty()) {
    j["base_model_name_or_path"] = config.base_model_name_or_path;
  }
  return j.dump(2) + "\n";
}

absl::StatusOr<PeftAdapterConfig> ParsePeftAdapterConfig(absl::string_view json,
                                                         absl::string_view file) {
  Json j = Json::parse(json.begin(), json.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("PEFT: ", file, " is not a JSON object"));
  }
  PeftAdapterConfig c;
  if (!j.contains("r") || !j["r"].is_number_integer() || !j.contains("lora_alpha") ||
      !j["lora_alpha"].is_number() || !j.contains("target_modules") ||
      !j["target_modules"].is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PEFT: ", file, " needs integer r, numeric lora_alpha and a target_modules list"));
  }
  if (j.contains("peft_type") && j["peft_type"] != "LORA") {
    return absl::UnimplementedError(
        absl::StrCat("PEFT: ", file, " has peft_type ", j["peft_type"].dump(), ", not LORA"));
  }
  c.r = j["r"].get<int64_t>();
  c.lora_alpha = j["lora_alpha"].get<double>();
  if (j.contains("lora_dropout") && j["lora_dropout"].is_number()) {
    c.lora_dropout = j["lora_dropout"].get<double>();
  }
  for (const Json& t : j["target_modules"]) {
    if (!t.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("PEFT: ", file, ": target_modules entry ", t.dump(), " is not a string"));
    }
    const std::string peft = t.get<std::string>();
    std::string tune;
    for (const auto& [k, v] : TargetModuleMap()) {
      if (v == peft) tune = k;
    }
    if (tune.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("PEFT: ", file, ": unknown target module '", peft, "'"));
    }
    c.target_modules.push_back(tune);
  }
  if (j.contains("base_model_name_or_path") && j["base_model_name_or_path"].is_string()) {
    c.base_model_name_or_path = j["base_model_name_or_path"].get<std::string>();
  }
  return c;
}

absl::Status SavePeftAdapter(const std::string& dir, const StateDict& adapters,
                             const PeftAdapterConfig& adapter_config,
                             const HfModelConfig& model_config, const PeftOptions& options) {
  for (const auto& [name, t] : adapters) {
    std::string module;
    char which;
    if (SplitAdapterName(name, &module, &which) && which == 'a' &&
        (t.dim() != 2 || t.size(0) != adapter_config.r)) {
      return absl::InvalidArgumentError(absl::StrCat("SavePeftAdapter: ", name, " has shape ",
                                                     ShapeToString(t.shape()),
                                                     " but adapter_config.r is ",
                                                     adapter_config.r));
    }
  }
  CCTUNE_ASSIGN_OR_RETURN(StateDict peft,
                          TuneToPeftAdapterWeights(adapters, model_config, options));
  if (peft.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("SavePeftAdapter: no lora_a/lora_b tensors to save into ", dir));
  }
  CCTUNE_ASSIGN_OR_RETURN(std::string json, PeftAdapterConfigJson(adapter_config));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("SavePeftAdapter: cannot create directory ", dir, ": ", ec.message()));
  }
  CCTUNE_RETURN_IF_ERROR(SaveSafetensors(absl::StrCat(dir, "/", kPeftAdapterWeightsFile), peft,
                                         {{"format", "pt"}}));
  return WriteFileAtomically(absl::StrCat(dir, "/", kPeftAdapterConfigFile), json);
}

absl::StatusOr<PeftAdapter> LoadPeftAdapter(const std::string& dir,
                                            const HfModelConfig& model_config,
                                            const PeftOptions& options) {
  PeftAdapter out;
  const std::string config_path = absl::StrCat(dir, "/", kPeftAdapterConfigFile);
  CCTUNE_ASSIGN_OR_RETURN(std::string json, ReadFileToString(config_path));
  CCTUNE_ASSIGN_OR_RETURN(out.config, ParsePeftAdapterConfig(json, config_path));
  CCTUNE_ASSIGN_OR_RETURN(SafetensorsFile file,
                          SafetensorsFile::Open(absl::StrCat(dir, "/", kPeftAdapterWeightsFile)));
  StateDict peft;
  for (const std::string& name : file.Names()) {
    CCTUNE_ASSIGN_OR_RETURN(Tensor view, file.Load(name));
    CCTUNE_ASSIGN_OR_RETURN(Tensor copy, view.Clone());
    peft.emplace(name, std::move(copy));
  }
  CCTUNE_ASSIGN_OR_RETURN(out.state_dict, PeftToTuneAdapterWeights(peft, model_config, options));
  return out;
}

}  // namespace cctune
