#include "checkpoint/hf.h"

#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/atomic_file.h"
#include "checkpoint/safetensors.h"
#include "core/status.h"
#include "nlohmann/json.hpp"

namespace cctune {
namespace {

using Json = nlohmann::json;

constexpr char kSingleFile[] = "model.safetensors";
constexpr char kIndexFile[] = "model.safetensors.index.json";
constexpr char kConfigFile[] = "config.json";

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : absl::StrCat(dir, "/", name);
}

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// ---- Names ----

// HF per-layer suffix <-> torchtune per-layer suffix, for weights and biases alike.
struct LayerName {
  const char* hf;
  const char* tune;
};
constexpr LayerName kLinears[] = {
    {"self_attn.q_proj", "attn.q_proj"},  {"self_attn.k_proj", "attn.k_proj"},
    {"self_attn.v_proj", "attn.v_proj"},  {"self_attn.o_proj", "attn.output_proj"},
    {"mlp.gate_proj", "mlp.w1"},          {"mlp.up_proj", "mlp.w3"},
    {"mlp.down_proj", "mlp.w2"},
};
constexpr LayerName kNorms[] = {
    {"input_layernorm.weight", "sa_norm.scale"},
    {"post_attention_layernorm.weight", "mlp_norm.scale"},
};
constexpr LayerName kTopLevel[] = {
    {"model.embed_tokens.weight", "tok_embeddings.weight"},
    {"model.norm.weight", "norm.scale"},
    {"lm_head.weight", "output.weight"},
};

// Splits "<prefix><N>.<rest>" into N and rest; N is decimal without leading zeros.
bool SplitLayer(absl::string_view name, absl::string_view prefix, int* layer,
                absl::string_view* rest) {
  if (!absl::StartsWith(name, prefix)) return false;
  name.remove_prefix(prefix.size());
  const size_t dot = name.find('.');
  if (dot == absl::string_view::npos || dot == 0 || dot > 9) return false;
  const absl::string_view digits = name.substr(0, dot);
  if (digits.size() > 1 && digits[0] == '0') return false;
  for (char c : digits) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  if (!absl::SimpleAtoi(digits, layer)) return false;
  *rest = name.substr(dot + 1);
  return true;
}

absl::StatusOr<std::string> MapName(absl::string_view name, bool from_hf) {
  for (const LayerName& n : kTopLevel) {
    if (name == (from_hf ? n.hf : n.tune)) return std::string(from_hf ? n.tune : n.hf);
  }
  int layer = 0;
  absl::string_view rest;
  if (SplitLayer(name, from_hf ? "model.layers." : "layers.", &layer, &rest)) {
    const std::string out_prefix = absl::StrCat(from_hf ? "layers." : "model.layers.", layer, ".");
    if (from_hf && rest == "self_attn.rotary_emb.inv_freq") return std::string();
    for (const LayerName& n : kNorms) {
      if (rest == (from_hf ? n.hf : n.tune)) return out_prefix + (from_hf ? n.tune : n.hf);
    }
    for (const LayerName& n : kLinears) {
      const absl::string_view src = from_hf ? n.hf : n.tune;
      for (const char* kind : {".weight", ".bias"}) {
        if (rest == absl::StrCat(src, kind)) {
          return absl::StrCat(out_prefix, from_hf ? n.tune : n.hf, kind);
        }
      }
    }
  }
  return absl::NotFoundError(absl::StrCat("no ", from_hf ? "torchtune" : "Hugging Face",
                                          " name for '", name, "'"));
}

// Which of q/k a torchtune name is, and so which head count permutes it (0: neither).
int64_t QkHeads(absl::string_view tune_name, const HfModelConfig& c) {
  int layer;
  absl::string_view rest;
  if (!SplitLayer(tune_name, "layers.", &layer, &rest)) return 0;
  if (rest == "attn.q_proj.weight" || rest == "attn.q_proj.bias") return c.num_attention_heads;
  if (rest == "attn.k_proj.weight" || rest == "attn.k_proj.bias") return c.num_key_value_heads;
  return 0;
}

std::string ListNames(const std::vector<std::string>& names, size_t max_names = 10) {
  std::vector<std::string> shown;
  for (size_t i = 0; i < names.size() && i < max_names; ++i) {
    shown.push_back(absl::StrCat("'", names[i], "'"));
  }
  std::string out = absl::StrJoin(shown, ", ");
  if (names.size() > max_names) absl::StrAppend(&out, " ... (", names.size(), " in all)");
  return out;
}

// Model order for shards: embeddings, layers by number, final norm, then lm_head.
std::tuple<int, int, std::string> ModelOrderKey(const std::string& hf_name) {
  int layer = 0;
  absl::string_view rest;
  if (hf_name == "model.embed_tokens.weight") return {0, 0, hf_name};
  if (SplitLayer(hf_name, "model.layers.", &layer, &rest)) return {1, layer, hf_name};
  if (hf_name == "lm_head.weight") return {3, 0, hf_name};
  return {2, 0, hf_name};
}

// ---- Config ----

absl::Status ConfigError(const std::string& file, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("HF config '", file, "': ", what));
}

absl::Status GetInt(const Json& j, const char* key, const std::string& file, bool required,
                    int64_t* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) return ConfigError(file, absl::StrCat("missing \"", key, "\""));
    return absl::OkStatus();
  }
  if (!it->is_number_integer()) {
    return ConfigError(file, absl::StrCat("\"", key, "\" must be an integer, got ", it->dump()));
  }
  *out = it->get<int64_t>();
  return absl::OkStatus();
}

absl::Status GetDouble(const Json& j, const char* key, const std::string& file, double* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number()) {
    return ConfigError(file, absl::StrCat("\"", key, "\" must be a number, got ", it->dump()));
  }
  *out = it->get<double>();
  return absl::OkStatus();
}

absl::Status GetBool(const Json& j, const char* key, const std::string& file, bool* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_boolean()) {
    return ConfigError(file, absl::StrCat("\"", key, "\" must be true or false, got ", it->dump()));
  }
  *out = it->get<bool>();
  return absl::OkStatus();
}

absl::StatusOr<HfModelConfig> ParseConfigImpl(absl::string_view text, const std::string& file) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return ConfigError(file, "not valid JSON");
  if (!j.is_object()) return ConfigError(file, absl::StrCat("a JSON ", j.type_name(), ", not an object"));
  HfModelConfig c;
  c.raw_json = std::string(text);
  auto mt = j.find("model_type");
  if (mt != j.end() && mt->is_string()) c.model_type = mt->get<std::string>();
  auto arch = j.find("architectures");
  if (arch != j.end() && arch->is_array()) {
    c.architectures.clear();
    for (const Json& a : *arch) {
      if (a.is_string()) c.architectures.push_back(a.get<std::string>());
    }
  }
  CCTUNE_RETURN_IF_ERROR(GetInt(j, "vocab_size", file, true, &c.vocab_size));
  CCTUNE_RETURN_IF_ERROR(GetInt(j, "hidden_size", file, true, &c.hidden_size));
  CCTUNE_RETURN_IF_ERROR(GetInt(j, "intermediate_size", file, true, &c.intermediate_size));
  CCTUNE_RETURN_IF_ERROR(GetInt(j, "num_hidden_layers", file, true, &c.num_hidden_layers));
  CCTUNE_RETURN_IF_ERROR(GetInt(j, "num_attention_heads", file, true, &c.num_attention_heads));
  c.num_key_value_heads = c.num_attention_heads;
  CCTUNE_RETURN_IF_ERROR(GetInt(j, "num_key_value_heads", file, false, &c.num_key_value_heads));
  if (c.num_attention_heads > 0) c.head_dim = c.hidden_size / c.num_attention_heads;
  CCTUNE_RETURN_IF_ERROR(GetInt(j, "head_dim", file, false, &c.head_dim));
  CCTUNE_RETURN_IF_ERROR(
      GetInt(j, "max_position_embeddings", file, false, &c.max_position_embeddings));
  CCTUNE_RETURN_IF_ERROR(GetDouble(j, "rms_norm_eps", file, &c.rms_norm_eps));
  CCTUNE_RETURN_IF_ERROR(GetDouble(j, "rope_theta", file, &c.rope_theta));
  auto rp = j.find("rope_parameters");  // newer transformers
  if (rp != j.end() && rp->is_object()) {
    CCTUNE_RETURN_IF_ERROR(GetDouble(*rp, "rope_theta", file, &c.rope_theta));
  }
  CCTUNE_RETURN_IF_ERROR(GetBool(j, "tie_word_embeddings", file, &c.tie_word_embeddings));
  bool attention_bias = false;
  CCTUNE_RETURN_IF_ERROR(GetBool(j, "attention_bias", file, &attention_bias));
  if (c.model_type == "qwen2") {
    c.qkv_bias = true;
    c.o_bias = false;
  } else {
    c.qkv_bias = c.o_bias = attention_bias;
  }
  CCTUNE_RETURN_IF_ERROR(GetBool(j, "mlp_bias", file, &c.mlp_bias));
  for (const char* key : {"dtype", "torch_dtype"}) {
    auto d = j.find(key);
    if (d != j.end() && d->is_string()) c.dtype = d->get<std::string>();
  }
  absl::Status valid = c.Validate();
  if (!valid.ok()) return ConfigError(file, valid.message());
  return c;
}

const char* TorchDTypeName(DType t) {
  switch (t) {
    case DType::kF32:
      return "float32";
    case DType::kBF16:
      return "bfloat16";
    case DType::kF16:
      return "float16";
    case DType::kI32:
      return "int32";
    case DType::kI64:
      return "int64";
    case DType::kBool:
      return "bool";
  }
  return "float32";
}

// ---- Permutation ----

absl::StatusOr<Tensor> PermuteRows(const Tensor& t, int64_t n_heads, int64_t head_dim,
                                   bool to_interleaved, const char* op) {
  if (!t.defined() || t.device().is_meta()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": needs a tensor with data, got ",
                     t.defined() ? t.device().ToString() : std::string("an undefined tensor")));
  }
  if (n_heads <= 0 || head_dim <= 0 || head_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": n_heads (", n_heads,
                                                   ") must be positive and head_dim (",
                                                   head_dim, ") positive and even"));
  }
  if ((t.dim() != 1 && t.dim() != 2) || t.size(0) != n_heads * head_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": expected [", n_heads * head_dim, "] or [", n_heads * head_dim,
        ", d] (n_heads ", n_heads, " x head_dim ", head_dim, "), got ",
        ShapeToString(t.shape())));
  }
  // Checkpoint conversion happens on the host; device tensors are copied over first.
  CCTUNE_ASSIGN_OR_RETURN(Tensor host, t.To(Device::Cpu()));
  CCTUNE_ASSIGN_OR_RETURN(Tensor src, host.Contiguous());
  CCTUNE_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(t.shape(), t.dtype()));
  const size_t row_bytes = (t.dim() == 2 ? t.size(1) : 1) * DTypeSize(t.dtype());
  const char* s = static_cast<const char*>(src.raw_data());
  char* d = static_cast<char*>(out.raw_data());
  const int64_t half = head_dim / 2;
#pragma omp parallel for schedule(static) if (n_heads * head_dim * row_bytes > (1 << 20))
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t j = 0; j < half; ++j) {
      for (int64_t p = 0; p < 2; ++p) {
        const int64_t interleaved = h * head_dim + 2 * j + p;
        const int64_t split = h * head_dim + p * half + j;
        const int64_t dst_row = to_interleaved ? interleaved : split;
        const int64_t src_row = to_interleaved ? split : interleaved;
        std::memcpy(d + dst_row * row_bytes, s + src_row * row_bytes, row_bytes);
      }
    }
  }
  return out;
}

// ---- Conversion ----

struct NameCheck {
  std::vector<std::string> missing, unexpected, bad_shapes;
  absl::Status ToStatus(const std::string& what) const {
    if (missing.empty() && unexpected.empty() && bad_shapes.empty()) return absl::OkStatus();
    std::string msg = absl::StrCat(what, ": tensors do not match the config");
    if (!missing.empty()) absl::StrAppend(&msg, "; missing ", ListNames(missing));
    if (!unexpected.empty()) absl::StrAppend(&msg, "; unexpected ", ListNames(unexpected));
    if (!bad_shapes.empty()) absl::StrAppend(&msg, "; wrong shapes: ", absl::StrJoin(bad_shapes, ", "));
    return absl::InvalidArgumentError(msg);
  }
};

// Checks torchtune-named `sd` against the config. `label` gives the name to report for a
// torchtune name (the HF name when converting from HF).
NameCheck CheckAgainstConfig(const StateDict& sd, const HfModelConfig& c,
                             const std::vector<std::pair<std::string, Shape>>& expected,
                             bool tied_output_allowed,
                             const std::function<std::string(const std::string&)>& label) {
  NameCheck check;
  std::map<std::string, Shape> want(expected.begin(), expected.end());
  for (const auto& [name, shape] : want) {
    auto it = sd.find(name);
    if (it == sd.end()) {
      check.missing.push_back(label(name));
    } else if (it->second.shape() != shape) {
      check.bad_shapes.push_back(absl::StrCat("'", label(name), "' is ",
                                              ShapeToString(it->second.shape()), ", config says ",
                                              ShapeToString(shape)));
    }
  }
  for (const auto& [name, t] : sd) {
    if (want.count(name)) continue;
    if (tied_output_allowed && name == "output.weight") {
      const Shape emb = {c.vocab_size, c.hidden_size};
      if (t.shape() != emb) {
        check.bad_shapes.push_back(absl::StrCat("'", label(name), "' is ",
                                                ShapeToString(t.shape()), ", config says ",
                                                ShapeToString(emb)));
      }
      continue;
    }
    check.unexpected.push_back(label(name));
  }
  return check;
}

absl::StatusOr<StateDict> Convert(const StateDict& in, const HfModelConfig& c,
                                  const HfConvertOptions& options, bool from_hf) {
  CCTUNE_RETURN_IF_ERROR(c.Validate());
  const char* what = from_hf ? "HF -> torchtune" : "torchtune -> HF";
  StateDict tune;  // torchtune names, before any permutation
  std::map<std::string, std::string> hf_name_of;
  std::vector<std::string> unmappable;
  if (from_hf) {
    for (const auto& [name, t] : in) {
      auto mapped = HfToTuneName(name);
      if (!mapped.ok()) {
        unmappable.push_back(name);
        continue;
      }
      if (mapped->empty()) continue;  // rotary_emb.inv_freq
      tune[*mapped] = t;
      hf_name_of[*mapped] = name;
    }
  } else {
    tune = in;
  }
  CCTUNE_ASSIGN_OR_RETURN(auto expected, ExpectedTuneTensors(c));
  NameCheck check = CheckAgainstConfig(
      tune, c, expected, c.tie_word_embeddings, [&](const std::string& n) {
        auto it = hf_name_of.find(n);
        if (it != hf_name_of.end()) return it->second;
        if (from_hf) {
          auto hf = TuneToHfName(n);
          return hf.ok() ? *hf : n;
        }
        return n;
      });
  check.unexpected.insert(check.unexpected.end(), unmappable.begin(), unmappable.end());
  CCTUNE_RETURN_IF_ERROR(check.ToStatus(what));

  StateDict out;
  for (const auto& [name, t] : tune) {
    if (!from_hf && c.tie_word_embeddings && name == "output.weight") continue;  // tied
    Tensor v = t;
    const int64_t heads = options.permute_qk ? QkHeads(name, c) : 0;
    if (heads > 0) {
      if (from_hf) {
        CCTUNE_ASSIGN_OR_RETURN(v, PermuteHfToInterleaved(t, heads, c.head_dim));
      } else {
        CCTUNE_ASSIGN_OR_RETURN(v, PermuteInterleavedToHf(t, heads, c.head_dim));
      }
    }
    if (from_hf) {
      out[name] = v;
    } else {
      CCTUNE_ASSIGN_OR_RETURN(std::string hf, TuneToHfName(name));
      out[hf] = v;
    }
  }
  return out;
}

// ---- Loading ----

absl::Status LoadError(const std::string& dir, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("HF checkpoint '", dir, "': ", what));
}

absl::Status AddTensors(const SafetensorsFile& f, const std::vector<std::string>& names,
                        const HfLoadOptions& options, StateDict* hf) {
  for (const std::string& name : names) {
    if (options.dtype.has_value()) {
      CCTUNE_ASSIGN_OR_RETURN((*hf)[name], f.Load(name, *options.dtype));
    } else {
      CCTUNE_ASSIGN_OR_RETURN((*hf)[name], f.Load(name));
    }
  }
  return absl::OkStatus();
}

// Reads the index and every shard it names, checking that they agree.
absl::Status LoadSharded(const std::string& dir, const HfLoadOptions& options, StateDict* hf,
                         std::vector<std::string>* files) {
  const std::string index_path = JoinPath(dir, kIndexFile);
  CCTUNE_ASSIGN_OR_RETURN(std::string text, ReadFileToString(index_path));
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return LoadError(dir, absl::StrCat(kIndexFile, " is not a JSON object"));
  }
  auto wm = j.find("weight_map");
  if (wm == j.end() || !wm->is_object()) {
    return LoadError(dir, absl::StrCat(kIndexFile, " has no \"weight_map\" object"));
  }
  std::map<std::string, std::vector<std::string>> by_file;  // file -> tensor names
  std::map<std::string, std::string> file_of;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it.value().is_string()) {
      return LoadError(dir, absl::StrCat(kIndexFile, ": weight_map entry for '", it.key(),
                                         "' is a JSON ", it.value().type_name(),
                                         ", not a file name"));
    }
    const std::string file = it.value().get<std::string>();
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..") {
      return LoadError(dir, absl::StrCat(kIndexFile, ": weight_map names file '", file,
                                         "' for '", it.key(), "'; expected a file name in ",
                                         "the checkpoint directory"));
    }
    by_file[file].push_back(it.key());
    file_of[it.key()] = file;
  }
  if (by_file.empty()) return LoadError(dir, absl::StrCat(kIndexFile, " has an empty weight_map"));
  // Every named file must exist before anything is read.
  for (const auto& [file, names] : by_file) {
    if (!FileExists(JoinPath(dir, file))) {
      return absl::NotFoundError(absl::StrCat("HF checkpoint '", dir, "': ", kIndexFile,
                                              " names '", file, "' (for '", names.front(),
                                              "' and ", names.size() - 1,
                                              " more) but it does not exist"));
    }
  }
  for (const auto& [file, names] : by_file) {
    const std::string path = JoinPath(dir, file);
    CCTUNE_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(path));
    for (const std::string& name : names) {
      if (!f.Contains(name)) {
        return LoadError(dir, absl::StrCat(kIndexFile, " puts '", name, "' in '", file,
                                           "' but that file does not hold it"));
      }
    }
    for (const std::string& name : f.Names()) {
      auto it = file_of.find(name);
      if (it == file_of.end()) {
        return LoadError(dir, absl::StrCat("'", file, "' holds '", name, "', which ",
                                           kIndexFile, " does not list"));
      }
      if (it->second != file) {
        return LoadError(dir, absl::StrCat("'", file, "' holds '", name, "', which ",
                                           kIndexFile, " puts in '", it->second, "'"));
      }
    }
    CCTUNE_RETURN_IF_ERROR(AddTensors(f, names, options, hf));
    files->push_back(path);
  }
  return absl::OkStatus();
}

absl::Status MakeDirs(const std::string& dir) {
  if (dir.empty()) return absl::OkStatus();
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    partial = dir.substr(0, pos);
    if (partial.empty()) continue;
    if (::mkdir(partial.c_str(), 0777) != 0 && errno != EEXIST) {
      return absl::InternalError(
          absl::StrCat("cannot create directory '", partial, "': ", std::strerror(errno)));
    }
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("'", dir, "' is not a directory"));
  }
  return absl::OkStatus();
}

bool IsShardName(const std::string& name) {
  // model-00001-of-00003.safetensors
  int a, b;
  char tail[32];
  return name.size() == std::strlen("model-00001-of-00003.safetensors") &&
         std::sscanf(name.c_str(), "model-%5d-of-%5d.%31s", &a, &b, tail) == 3 &&
         std::strcmp(tail, "safetensors") == 0;
}

}  // namespace

// ---- Public API ----

absl::Status HfModelConfig::Validate() const {
  if (vocab_size <= 0 || hidden_size <= 0 || intermediate_size <= 0 || num_hidden_layers <= 0 ||
      num_attention_heads <= 0 || num_key_value_heads <= 0 || head_dim <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sizes must be positive: vocab_size ", vocab_size, ", hidden_size ", hidden_size,
        ", intermediate_size ", intermediate_size, ", num_hidden_layers ", num_hidden_layers,
        ", num_attention_heads ", num_attention_heads, ", num_key_value_heads ",
        num_key_value_heads, ", head_dim ", head_dim));
  }
  if (num_attention_heads % num_key_value_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_attention_heads (", num_attention_heads,
                                                   ") must be divisible by num_key_value_heads (",
                                                   num_key_value_heads, ")"));
  }
  if (head_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("head_dim (", head_dim, ") must be even for RoPE"));
  }
  if (model_type != "qwen2" && qkv_bias != o_bias) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model_type '", model_type, "' has one attention_bias flag for q/k/v/o, but qkv_bias (",
        qkv_bias, ") != o_bias (", o_bias, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> HfModelConfig::ToJson() const {
  CCTUNE_RETURN_IF_ERROR(Validate());
  try {
    Json j = Json::object();
    const bool fresh = raw_json.empty();
    if (!fresh) {
      j = Json::parse(raw_json, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.is_object()) {
        return absl::InvalidArgumentError("HfModelConfig::ToJson: raw_json is not a JSON object");
      }
    }
    j["architectures"] = architectures;
    j["model_type"] = model_type;
    j["vocab_size"] = vocab_size;
    j["hidden_size"] = hidden_size;
    j["intermediate_size"] = intermediate_size;
    j["num_hidden_layers"] = num_hidden_layers;
    j["num_attention_heads"] = num_attention_heads;
    j["num_key_value_heads"] = num_key_value_heads;
    j["head_dim"] = head_dim;
    j["max_position_embeddings"] = max_position_embeddings;
    j["rms_norm_eps"] = rms_norm_eps;
    if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
      j["rope_parameters"]["rope_theta"] = rope_theta;
    } else {
      j["rope_theta"] = rope_theta;
    }
    j["tie_word_embeddings"] = tie_word_embeddings;
    if (model_type != "qwen2") j["attention_bias"] = qkv_bias;
    if (fresh || j.contains("mlp_bias") || mlp_bias) j["mlp_bias"] = mlp_bias;
    if (j.contains("dtype")) {
      j["dtype"] = dtype;
    } else {
      j["torch_dtype"] = dtype;
    }
    if (fresh) {
      j["hidden_act"] = "silu";
      j["use_cache"] = true;
    }
    return j.dump(2) + "\n";
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("HfModelConfig::ToJson: ", e.what()));
  }
}

absl::StatusOr<HfModelConfig> ParseHfConfig(absl::string_view json, const std::string& file) {
  try {
    return ParseConfigImpl(json, file);
  } catch (const std::exception& e) {
    return ConfigError(file, e.what());
  }
}

absl::StatusOr<HfModelConfig> ReadHfConfig(const std::string& dir) {
  const std::string path = JoinPath(dir, kConfigFile);
  auto text = ReadFileToString(path);
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat("HF checkpoint '", dir, "': ", text.status().message()));
  }
  return ParseHfConfig(*text, path);
}

absl::StatusOr<std::string> HfToTuneName(absl::string_view hf_name) {
  return MapName(hf_name, /*from_hf=*/true);
}

absl::StatusOr<std::string> TuneToHfName(absl::string_view tune_name) {
  return MapName(tune_name, /*from_hf=*/false);
}

absl::StatusOr<std::vector<std::pair<std::string, Shape>>> ExpectedTuneTensors(
    const HfModelConfig& c, bool include_tied_output) {
  CCTUNE_RETURN_IF_ERROR(c.Validate());
  const int64_t d = c.hidden_size, q = c.num_attention_heads * c.head_dim,
                kv = c.num_key_value_heads * c.head_dim, h = c.intermediate_size;
  std::vector<std::pair<std::string, Shape>> out;
  out.emplace_back("tok_embeddings.weight", Shape{c.vocab_size, d});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = absl::StrCat("layers.", l, ".");
    out.emplace_back(p + "sa_norm.scale", Shape{d});
    out.emplace_back(p + "attn.q_proj.weight", Shape{q, d});
    out.emplace_back(p + "attn.k_proj.weight", Shape{kv, d});
    out.emplace_back(p + "attn.v_proj.weight", Shape{kv, d});
    out.emplace_back(p + "attn.output_proj.weight", Shape{d, q});
    if (c.qkv_bias) {
      out.emplace_back(p + "attn.q_proj.bias", Shape{q});
      out.emplace_back(p + "attn.k_proj.bias", Shape{kv});
      out.emplace_back(p + "attn.v_proj.bias", Shape{kv});
    }
    if (c.o_bias) out.emplace_back(p + "attn.output_proj.bias", Shape{d});
    out.emplace_back(p + "mlp_norm.scale", Shape{d});
    out.emplace_back(p + "mlp.w1.weight", Shape{h, d});
    out.emplace_back(p + "mlp.w2.weight", Shape{d, h});
    out.emplace_back(p + "mlp.w3.weight", Shape{h, d});
    if (c.mlp_bias) {
      out.emplace_back(p + "mlp.w1.bias", Shape{h});
      out.emplace_back(p + "mlp.w2.bias", Shape{d});
      out.emplace_back(p + "mlp.w3.bias", Shape{h});
    }
  }
  out.emplace_back("norm.scale", Shape{d});
  if (!c.tie_word_embeddings || include_tied_output) {
    out.emplace_back("output.weight", Shape{c.vocab_size, d});
  }
  return out;
}

absl::StatusOr<Tensor> PermuteHfToInterleaved(const Tensor& t, int64_t n_heads,
                                              int64_t head_dim) {
  return PermuteRows(t, n_heads, head_dim, /*to_interleaved=*/true, "PermuteHfToInterleaved");
}

absl::StatusOr<Tensor> PermuteInterleavedToHf(const Tensor& t, int64_t n_heads,
                                              int64_t head_dim) {
  return PermuteRows(t, n_heads, head_dim, /*to_interleaved=*/false, "PermuteInterleavedToHf");
}

absl::StatusOr<StateDict> HfToTune(const StateDict& hf, const HfModelConfig& config,
                                   const HfConvertOptions& options) {
  return Convert(hf, config, options, /*from_hf=*/true);
}

absl::StatusOr<StateDict> TuneToHf(const StateDict& tune, const HfModelConfig& config,
                                   const HfConvertOptions& options) {
  return Convert(tune, config, options, /*from_hf=*/false);
}

absl::StatusOr<HfCheckpoint> LoadHfCheckpoint(const std::string& dir,
                                              const HfLoadOptions& options) {
  HfCheckpoint ck;
  CCTUNE_ASSIGN_OR_RETURN(ck.config, ReadHfConfig(dir));
  StateDict hf;
  if (FileExists(JoinPath(dir, kIndexFile))) {
    CCTUNE_RETURN_IF_ERROR(LoadSharded(dir, options, &hf, &ck.files));
  } else if (FileExists(JoinPath(dir, kSingleFile))) {
    const std::string path = JoinPath(dir, kSingleFile);
    CCTUNE_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(path));
    CCTUNE_RETURN_IF_ERROR(AddTensors(f, f.Names(), options, &hf));
    ck.files.push_back(path);
  } else {
    return absl::NotFoundError(absl::StrCat("HF checkpoint '", dir, "': neither ", kSingleFile,
                                            " nor ", kIndexFile, " exists"));
  }
  HfConvertOptions convert;
  convert.permute_qk = options.permute_qk;
  auto tune = HfToTune(hf, ck.config, convert);
  if (!tune.ok()) {
    return absl::Status(tune.status().code(),
                        absl::StrCat("HF checkpoint '", dir, "': ", tune.status().message()));
  }
  ck.state_dict = std::move(tune).value();
  if (ck.config.tie_word_embeddings && options.alias_tied_output &&
      ck.state_dict.count("output.weight") == 0) {
    ck.state_dict["output.weight"] = ck.state_dict.at("tok_embeddings.weight");
  }
  return ck;
}

absl::Status SaveHfCheckpoint(const std::string& dir, const StateDict& state_dict,
                              const HfModelConfig& config, const HfSaveOptions& options) {
  HfConvertOptions convert;
  convert.permute_qk = options.permute_qk;
  CCTUNE_ASSIGN_OR_RETURN(StateDict hf, TuneToHf(state_dict, config, convert));
  HfModelConfig out_config = config;
  if (options.dtype.has_value()) {
    for (auto& [name, t] : hf) {
      CCTUNE_ASSIGN_OR_RETURN(t, t.To(*options.dtype));
    }
    out_config.dtype = TorchDTypeName(*options.dtype);
  } else if (!hf.empty()) {
    out_config.dtype = TorchDTypeName(hf.begin()->second.dtype());
  }
  CCTUNE_ASSIGN_OR_RETURN(std::string config_json, out_config.ToJson());
  CCTUNE_RETURN_IF_ERROR(MakeDirs(dir));

  // Shards: greedy in model order.
  std::vector<std::string> order;
  for (const auto& [name, t] : hf) order.push_back(name);
  std::sort(order.begin(), order.end(), [](const std::string& a, const std::string& b) {
    return ModelOrderKey(a) < ModelOrderKey(b);
  });
  std::vector<StateDict> shards(1);
  uint64_t shard_bytes = 0, total_bytes = 0;
  for (const std::string& name : order) {
    const uint64_t bytes = hf.at(name).nbytes();
    if (!shards.back().empty() && shard_bytes + bytes > options.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back()[name] = hf.at(name);
    shard_bytes += bytes;
    total_bytes += bytes;
  }
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  std::set<std::string> written;
  if (shards.size() == 1) {
    CCTUNE_RETURN_IF_ERROR(SaveSafetensors(JoinPath(dir, kSingleFile), shards[0], metadata));
    written.insert(kSingleFile);
  } else {
    Json weight_map = Json::object();
    for (size_t i = 0; i < shards.size(); ++i) {
      char name[64];
      std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
      CCTUNE_RETURN_IF_ERROR(SaveSafetensors(JoinPath(dir, name), shards[i], metadata));
      for (const auto& [tensor, t] : shards[i]) weight_map[tensor] = name;
      written.insert(name);
    }
    Json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
    CCTUNE_RETURN_IF_ERROR(WriteFileAtomically(JoinPath(dir, kIndexFile), index.dump(2) + "\n"));
    written.insert(kIndexFile);
  }
  CCTUNE_RETURN_IF_ERROR(WriteFileAtomically(JoinPath(dir, kConfigFile), config_json));
  // Remove weights left by an earlier save that the new files replace.
  if (DIR* d = ::opendir(dir.c_str())) {
    std::vector<std::string> stale;
    while (dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      const bool ours = name == kSingleFile || name == kIndexFile || IsShardName(name);
      if (ours && written.count(name) == 0) stale.push_back(name);
    }
    ::closedir(d);
    for (const std::string& name : stale) ::unlink(JoinPath(dir, name).c_str());
  }
  return absl::OkStatus();
}

}  // namespace cctune
