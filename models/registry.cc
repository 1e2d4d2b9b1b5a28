#include "models/registry.h"

#include <algorithm>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/status.h"
#include "models/llama2/llama2.h"
#include "models/llama2c/llama2c.h"
#include "models/llama3/llama3.h"
#include "models/llama3_1/llama3_1.h"
#include "models/llama3_2/llama3_2.h"
#include "models/mistral/mistral.h"
#include "models/qwen2_5/qwen2_5.h"
#include "models/tiny/tiny.h"

namespace cctune {

namespace {

constexpr absl::string_view kCctunePrefix = "cctune.models.";
constexpr absl::string_view kTorchtunePrefix = "torchtune.models.";

using Decoder = absl::StatusOr<std::unique_ptr<TransformerDecoder>>;

// A builder without arguments.
ModelBuilderInfo Fixed(std::string family, std::string builder, std::string description,
                       std::function<Decoder()> fn) {
  ModelBuilderInfo info;
  info.name = absl::StrCat(kCctunePrefix, family, ".", builder);
  info.description = std::move(description);
  info.build = [fn = std::move(fn)](const ModelArgs&) { return fn(); };
  return info;
}

// Llama 3.2 builders take tie_word_embeddings, as torchtune's do.
ModelBuilderInfo Llama3_2Builder(std::string builder, std::string description,
                                 Decoder (*fn)(bool)) {
  ModelBuilderInfo info;
  info.name = absl::StrCat(kCctunePrefix, "llama3_2.", builder);
  info.args = {"tie_word_embeddings"};
  info.description = std::move(description);
  info.build = [name = info.name, fn](const ModelArgs& args) -> Decoder {
    CCTUNE_ASSIGN_OR_RETURN(bool tie, GetBoolArg(args, "tie_word_embeddings", true, name));
    return fn(tie);
  };
  return info;
}

ModelBuilderInfo Llama2cBuilder() {
  ModelBuilderInfo info;
  info.name = absl::StrCat(kCctunePrefix, "llama2c.llama2c");
  info.args = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};
  info.required_args = info.args;
  info.description = "any llama2.c checkpoint, from its 7-int header";
  info.build = [name = info.name](const ModelArgs& args) -> Decoder {
    Llama2cConfig c;
    int32_t* fields[] = {&c.dim,        &c.hidden_dim, &c.n_layers, &c.n_heads,
                         &c.n_kv_heads, &c.vocab_size, &c.seq_len};
    const char* keys[] = {"dim",        "hidden_dim", "n_layers", "n_heads",
                          "n_kv_heads", "vocab_size", "seq_len"};
    for (int i = 0; i < 7; ++i) {
      CCTUNE_ASSIGN_OR_RETURN(int64_t v, GetIntArg(args, keys[i], 0, name));
      *fields[i] = static_cast<int32_t>(v);
    }
    return Llama2c(c);
  };
  return info;
}

ModelBuilderInfo TinyBuilder() {
  ModelBuilderInfo info;
  info.name = absl::StrCat(kCctunePrefix, "tiny.tiny_llama");
  info.args = {"vocab_size", "num_layers",       "num_heads",   "num_kv_heads",
               "embed_dim",  "intermediate_dim", "max_seq_len", "tie_word_embeddings"};
  info.description = "a tiny GQA model for tests (defaults: v=256, 2 layers, 8/2 heads, d=64)";
  info.build = [name = info.name](const ModelArgs& args) -> Decoder {
    CCTUNE_ASSIGN_OR_RETURN(int64_t v, GetIntArg(args, "vocab_size", 256, name));
    CCTUNE_ASSIGN_OR_RETURN(int64_t l, GetIntArg(args, "num_layers", 2, name));
    CCTUNE_ASSIGN_OR_RETURN(int64_t h, GetIntArg(args, "num_heads", 8, name));
    CCTUNE_ASSIGN_OR_RETURN(int64_t kv, GetIntArg(args, "num_kv_heads", 2, name));
    CCTUNE_ASSIGN_OR_RETURN(int64_t d, GetIntArg(args, "embed_dim", 64, name));
    CCTUNE_ASSIGN_OR_RETURN(int64_t f, GetIntArg(args, "intermediate_dim", 160, name));
    CCTUNE_ASSIGN_OR_RETURN(int64_t s, GetIntArg(args, "max_seq_len", 256, name));
    CCTUNE_ASSIGN_OR_RETURN(bool tie, GetBoolArg(args, "tie_word_embeddings", false, name));
    return TinyLlama(v, l, h, kv, d, f, s, tie);
  };
  return info;
}

void RegisterBuiltins(ModelRegistry& r) {
  auto add = [&](ModelBuilderInfo info) { CCTUNE_CHECK_OK(r.Register(std::move(info))); };
  add(Fixed("llama2", "llama2_7b", "Llama 2 7B", [] { return Llama2_7B(); }));
  add(Fixed("llama2", "llama2_13b", "Llama 2 13B", [] { return Llama2_13B(); }));
  add(Fixed("llama2", "llama2_70b", "Llama 2 70B (GQA 64/8)", [] { return Llama2_70B(); }));
  add(Fixed("llama3", "llama3_8b", "Llama 3 8B", [] { return Llama3_8B(); }));
  add(Fixed("llama3", "llama3_70b", "Llama 3 70B", [] { return Llama3_70B(); }));
  add(Fixed("llama3_1", "llama3_1_8b", "Llama 3.1 8B", [] { return Llama3_1_8B(); }));
  add(Fixed("llama3_1", "llama3_1_70b", "Llama 3.1 70B", [] { return Llama3_1_70B(); }));
  add(Fixed("llama3_1", "llama3_1_405b", "Llama 3.1 405B", [] { return Llama3_1_405B(); }));
  add(Llama3_2Builder("llama3_2_1b", "Llama 3.2 1B (tied output)", &Llama3_2_1B));
  add(Llama3_2Builder("llama3_2_3b", "Llama 3.2 3B (tied output)", &Llama3_2_3B));
  add(Fixed("mistral", "mistral_7b", "Mistral 7B", [] { return Mistral_7B(); }));
  add(Fixed("qwen2_5", "qwen2_5_0_5b", "Qwen 2.5 0.5B", [] { return Qwen2_5_0_5B(); }));
  add(Fixed("qwen2_5", "qwen2_5_1_5b_base", "Qwen 2.5 1.5B base",
            [] { return Qwen2_5_1_5B_Base(); }));
  add(Fixed("qwen2_5", "qwen2_5_1_5b_instruct", "Qwen 2.5 1.5B instruct",
            [] { return Qwen2_5_1_5B_Instruct(); }));
  add(Fixed("qwen2_5", "qwen2_5_3b", "Qwen 2.5 3B", [] { return Qwen2_5_3B(); }));
  add(Fixed("qwen2_5", "qwen2_5_7b_base", "Qwen 2.5 7B base", [] { return Qwen2_5_7B_Base(); }));
  add(Fixed("qwen2_5", "qwen2_5_7b_instruct", "Qwen 2.5 7B instruct",
            [] { return Qwen2_5_7B_Instruct(); }));
  add(Llama2cBuilder());
  add(TinyBuilder());
}

// The family part of "cctune.models.<family>.<builder>", or "".
std::string Family(absl::string_view canonical) {
  if (!absl::StartsWith(canonical, kCctunePrefix)) return "";
  absl::string_view rest = canonical.substr(kCctunePrefix.size());
  return std::string(rest.substr(0, rest.find('.')));
}

}  // namespace

std::string CanonicalModelName(absl::string_view name) {
  if (absl::StartsWith(name, kTorchtunePrefix)) {
    return absl::StrCat(kCctunePrefix, name.substr(kTorchtunePrefix.size()));
  }
  return std::string(name);
}

ModelRegistry& ModelRegistry::Global() {
  static ModelRegistry* registry = [] {
    auto* r = new ModelRegistry();
    RegisterBuiltins(*r);
    return r;
  }();
  return *registry;
}

absl::Status ModelRegistry::Register(ModelBuilderInfo info) {
  if (!absl::StartsWith(info.name, kCctunePrefix) || info.build == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("ModelRegistry: '", info.name,
                                                   "' must start with '", kCctunePrefix,
                                                   "' and have a builder function"));
  }
  if (builders_.count(info.name) > 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("ModelRegistry: '", info.name, "' is already registered"));
  }
  std::string name = info.name;
  builders_.emplace(std::move(name), std::move(info));
  return absl::OkStatus();
}

absl::StatusOr<const ModelBuilderInfo*> ModelRegistry::Find(absl::string_view name) const {
  const std::string canonical = CanonicalModelName(name);
  auto it = builders_.find(canonical);
  if (it != builders_.end()) return &it->second;
  const std::string family = Family(canonical);
  std::vector<std::string> similar;
  for (const auto& [n, info] : builders_) {
    if (!family.empty() && Family(n) == family) similar.push_back(n);
  }
  if (similar.empty()) similar = Names();
  return absl::NotFoundError(
      absl::StrCat("unknown model builder '", name, "'; known: ", absl::StrJoin(similar, ", ")));
}

absl::StatusOr<std::unique_ptr<TransformerDecoder>> ModelRegistry::Build(
    absl::string_view name, const ModelArgs& args) const {
  CCTUNE_ASSIGN_OR_RETURN(const ModelBuilderInfo* info, Find(name));
  for (const auto& [key, value] : args) {
    if (std::find(info->args.begin(), info->args.end(), key) == info->args.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          info->name, ": unknown argument '", key,
          "'; accepted: ", info->args.empty() ? "none" : absl::StrJoin(info->args, ", ")));
    }
  }
  std::vector<std::string> missing;
  for (const std::string& key : info->required_args) {
    if (args.count(key) == 0) missing.push_back(key);
  }
  if (!missing.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(info->name, ": missing required argument(s) ", absl::StrJoin(missing, ", ")));
  }
  return info->build(args);
}

std::vector<std::string> ModelRegistry::Names() const {
  std::vector<std::string> names;
  for (const auto& [n, info] : builders_) names.push_back(n);
  return names;
}

absl::StatusOr<int64_t> GetIntArg(const ModelArgs& args, const std::string& key,
                                  int64_t default_value, absl::string_view builder) {
  auto it = args.find(key);
  if (it == args.end()) return default_value;
  int64_t v;
  if (!absl::SimpleAtoi(it->second, &v)) {
    return absl::InvalidArgumentError(
        absl::StrCat(builder, ": argument '", key, "' must be an integer, got '", it->second, "'"));
  }
  return v;
}

absl::StatusOr<double> GetDoubleArg(const ModelArgs& args, const std::string& key,
                                    double default_value, absl::string_view builder) {
  auto it = args.find(key);
  if (it == args.end()) return default_value;
  double v;
  if (!absl::SimpleAtod(it->second, &v)) {
    return absl::InvalidArgumentError(
        absl::StrCat(builder, ": argument '", key, "' must be a number, got '", it->second, "'"));
  }
  return v;
}

absl::StatusOr<bool> GetBoolArg(const ModelArgs& args, const std::string& key, bool default_value,
                                absl::string_view builder) {
  auto it = args.find(key);
  if (it == args.end()) return default_value;
  const std::string& s = it->second;
  if (s == "true" || s == "True" || s == "1") return true;
  if (s == "false" || s == "False" || s == "0") return false;
  return absl::InvalidArgumentError(
      absl::StrCat(builder, ": argument '", key, "' must be true or false, got '", s, "'"));
}

}  // namespace cctune
