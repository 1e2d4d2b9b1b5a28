#include "models/hf_config/hf_config.h"

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "checkpoint/atomic_file.h"
#include "config/schema.h"
#include "core/status.h"
#include "models/model_builder.h"
#include "nlohmann/json.hpp"

namespace cctune {

namespace {

using Json = nlohmann::json;

// Reads the fields of one config.json; every error names the file and the field.
class Fields {
 public:
  Fields(const Json& j, std::string file) : j_(j), file_(std::move(file)) {}

  absl::Status Error(absl::string_view field, const Json& value, absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(file_, ": \"", field, "\" = ", value.dump(), ": ", what));
  }
  absl::Status Unsupported(absl::string_view field, const Json& value,
                           absl::string_view what) const {
    return absl::UnimplementedError(
        absl::StrCat(file_, ": \"", field, "\" = ", value.dump(), ": ", what));
  }

  // nullptr when absent or null.
  const Json* Find(const Json& in, const char* field) const {
    auto it = in.find(field);
    return it == in.end() || it->is_null() ? nullptr : &*it;
  }

  absl::StatusOr<int64_t> Int(const char* field, std::optional<int64_t> fallback,
                              const Json* in = nullptr) const {
    const Json* v = Find(in != nullptr ? *in : j_, field);
    if (v == nullptr) {
      if (fallback.has_value()) return *fallback;
      return absl::InvalidArgumentError(absl::StrCat(file_, ": missing \"", field, "\""));
    }
    if (!v->is_number_integer()) return Error(field, *v, "must be an integer");
    return v->get<int64_t>();
  }
  absl::StatusOr<double> Number(const char* field, double fallback,
                                const Json* in = nullptr) const {
    const Json* v = Find(in != nullptr ? *in : j_, field);
    if (v == nullptr) return fallback;
    if (!v->is_number()) return Error(field, *v, "must be a number");
    return v->get<double>();
  }
  absl::StatusOr<bool> Bool(const char* field, bool fallback) const {
    const Json* v = Find(j_, field);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) return Error(field, *v, "must be true or false");
    return v->get<bool>();
  }
  absl::StatusOr<std::string> String(const char* field, const char* fallback,
                                     const Json* in = nullptr) const {
    const Json* v = Find(in != nullptr ? *in : j_, field);
    if (v == nullptr) {
      if (fallback != nullptr) return std::string(fallback);
      return absl::InvalidArgumentError(absl::StrCat(file_, ": missing \"", field, "\""));
    }
    if (!v->is_string()) return Error(field, *v, "must be a string");
    return v->get<std::string>();
  }

 private:
  const Json& j_;
  std::string file_;
};

// rope_scaling (or, in newer transformers, rope_parameters) of type default or llama3.
absl::Status ReadRopeScaling(const Json& j, const Fields& f, DecoderConfig& c) {
  for (const char* field : {"rope_scaling", "rope_parameters"}) {
    const Json* s = f.Find(j, field);
    if (s == nullptr) continue;
    if (!s->is_object()) return f.Error(field, *s, "must be an object or null");
    CCTUNE_ASSIGN_OR_RETURN(c.rope_base, f.Number("rope_theta", c.rope_base, s));
    const char* type_key = f.Find(*s, "rope_type") != nullptr ? "rope_type" : "type";
    CCTUNE_ASSIGN_OR_RETURN(std::string type, f.String(type_key, "default", s));
    if (type == "default") continue;
    if (type != "llama3") {
      return f.Unsupported(absl::StrCat(field, ".", type_key), Json(type),
                           "only the RoPE scaling types default and llama3 are implemented");
    }
    ops::RopeScaling r;
    CCTUNE_ASSIGN_OR_RETURN(r.factor, f.Number("factor", r.factor, s));
    CCTUNE_ASSIGN_OR_RETURN(r.low_freq_factor, f.Number("low_freq_factor", r.low_freq_factor, s));
    CCTUNE_ASSIGN_OR_RETURN(r.high_freq_factor,
                            f.Number("high_freq_factor", r.high_freq_factor, s));
    CCTUNE_ASSIGN_OR_RETURN(
        r.original_max_position_embeddings,
        f.Int("original_max_position_embeddings", r.original_max_position_embeddings, s));
    if (!(r.factor > 0) || !(r.low_freq_factor > 0) || !(r.high_freq_factor > r.low_freq_factor) ||
        r.original_max_position_embeddings <= 0) {
      return f.Error(field, *s,
                     "llama3 scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor "
                     "and original_max_position_embeddings > 0");
    }
    c.rope_scaling = r;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DecoderConfig> DecoderConfigFromHfJson(absl::string_view json,
                                                      const std::string& file,
                                                      std::optional<int64_t> max_seq_len) {
  const Json j = Json::parse(json.begin(), json.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": not a JSON object"));
  }
  const Fields f(j, file);
  CCTUNE_ASSIGN_OR_RETURN(const std::string model_type, f.String("model_type", nullptr));
  if (model_type != "llama" && model_type != "mistral" && model_type != "qwen2") {
    return f.Unsupported("model_type", Json(model_type),
                         "supported model types are llama, mistral and qwen2");
  }
  const bool qwen2 = model_type == "qwen2";
  CCTUNE_ASSIGN_OR_RETURN(const std::string act, f.String("hidden_act", "silu"));
  if (act != "silu") {
    return f.Unsupported("hidden_act", Json(act), "only silu (SwiGLU) is implemented");
  }
  DecoderConfig c;
  CCTUNE_ASSIGN_OR_RETURN(c.vocab_size, f.Int("vocab_size", std::nullopt));
  CCTUNE_ASSIGN_OR_RETURN(c.embed_dim, f.Int("hidden_size", std::nullopt));
  CCTUNE_ASSIGN_OR_RETURN(c.num_layers, f.Int("num_hidden_layers", std::nullopt));
  CCTUNE_ASSIGN_OR_RETURN(c.num_heads, f.Int("num_attention_heads", std::nullopt));
  CCTUNE_ASSIGN_OR_RETURN(c.num_kv_heads, f.Int("num_key_value_heads", c.num_heads));
  CCTUNE_ASSIGN_OR_RETURN(c.head_dim, f.Int("head_dim", int64_t{0}));
  CCTUNE_ASSIGN_OR_RETURN(c.intermediate_dim, f.Int("intermediate_size", std::nullopt));
  CCTUNE_ASSIGN_OR_RETURN(c.max_seq_len, f.Int("max_position_embeddings", int64_t{2048}));
  if (max_seq_len.has_value()) c.max_seq_len = *max_seq_len;
  CCTUNE_ASSIGN_OR_RETURN(double eps, f.Number("rms_norm_eps", 1e-6));
  c.norm_eps = static_cast<float>(eps);
  CCTUNE_ASSIGN_OR_RETURN(c.rope_base, f.Number("rope_theta", 10000.0));
  CCTUNE_RETURN_IF_ERROR(ReadRopeScaling(j, f, c));
  CCTUNE_ASSIGN_OR_RETURN(c.tie_word_embeddings, f.Bool("tie_word_embeddings", false));
  c.rope_pairing = qwen2 ? ops::RopePairing::kHalfSplit : ops::RopePairing::kInterleaved;
  c.qkv_bias = qwen2;
  CCTUNE_ASSIGN_OR_RETURN(const bool attention_bias, f.Bool("attention_bias", false));
  if (attention_bias && !qwen2) {
    return f.Unsupported("attention_bias", Json(true),
                         "biases on q/k/v/o_proj are not implemented for llama or mistral");
  }
  CCTUNE_ASSIGN_OR_RETURN(const bool mlp_bias, f.Bool("mlp_bias", false));
  if (mlp_bias) return f.Unsupported("mlp_bias", Json(true), "MLP biases are not implemented");
  // A sliding window at least as long as the context changes nothing.
  CCTUNE_ASSIGN_OR_RETURN(const bool use_window, f.Bool("use_sliding_window", !qwen2));
  const Json* window = f.Find(j, "sliding_window");
  if (use_window && window != nullptr) {
    if (!window->is_number_integer()) return f.Error("sliding_window", *window, "not an integer");
    if (window->get<int64_t>() < c.max_seq_len) {
      return f.Unsupported("sliding_window", *window,
                           absl::StrCat("sliding-window attention is not implemented; it is a "
                                        "no-op only with max_seq_len <= the window (now ",
                                        c.max_seq_len, ")"));
    }
  }
  return c;
}

absl::StatusOr<DecoderConfig> ReadHfDecoderConfig(const std::string& path,
                                                  std::optional<int64_t> max_seq_len) {
  std::error_code ec;
  const std::string file = std::filesystem::is_directory(path, ec)
                               ? (std::filesystem::path(path) / "config.json").string()
                               : path;
  CCTUNE_ASSIGN_OR_RETURN(std::string text, ReadFileToString(file));
  return DecoderConfigFromHfJson(text, file, max_seq_len);
}

absl::Status RegisterHfConfigModels() {
  static const absl::Status status = [] {
    Schema schema("", "the architecture a Hugging Face checkpoint's config.json describes");
    schema
        .Optional("path", KeyType::String(),
                  "config.json or its directory (default: the checkpointer's checkpoint_dir)")
        .Optional("max_seq_len", KeyType::Int().InRange(1, kMaxDecoderSeqLen),
                  "context length (default: max_position_embeddings)");
    DecoderConfigFn make = [](const ConfigNode& node,
                              const ConfigNode& from_checkpoint) -> absl::StatusOr<DecoderConfig> {
      const ConfigNode* path = node.Child("path");
      if (path == nullptr || path->IsNull())
        path = BuilderArg(node, from_checkpoint, "checkpoint_dir");
      if (path == nullptr || path->IsNull()) {
        return absl::InvalidArgumentError(
            "set path (config.json or its directory), or use a Hugging Face checkpointer whose "
            "checkpoint_dir holds config.json");
      }
      std::optional<int64_t> max_seq_len;
      if (const ConfigNode* s = node.Child("max_seq_len"); s != nullptr && !s->IsNull()) {
        max_seq_len = s->int_value();
      }
      CCTUNE_ASSIGN_OR_RETURN(DecoderConfig c,
                              ReadHfDecoderConfig(path->string_value(), max_seq_len));
      // The HF checkpointer permutes q/k to interleaved pairs unless its model_type is QWEN2;
      // the pairs this config implies must be the ones the weights arrive in.
      const ConfigNode* type = BuilderArg(ConfigNode(), from_checkpoint, "checkpoint_model_type");
      if (type != nullptr && type->kind() == ConfigNode::Kind::kString) {
        const bool qwen2_weights = type->string_value() == "QWEN2";
        if (qwen2_weights != (c.rope_pairing == ops::RopePairing::kHalfSplit)) {
          return absl::InvalidArgumentError(absl::StrCat(
              path->string_value(), " describes a ", qwen2_weights ? "llama/mistral" : "qwen2",
              " model but the checkpointer's model_type is ", type->string_value(),
              ", which loads q/k for ", qwen2_weights ? "qwen2" : "llama-style",
              " RoPE pairs: set checkpointer.model_type to ",
              qwen2_weights ? "LLAMA3 (or LLAMA2, MISTRAL)" : "QWEN2"));
        }
      }
      return c;
    };
    CCTUNE_RETURN_IF_ERROR(RegisterModelBuilder("cctune.models.from_config_json", schema, make));
    return RegisterLoRAModelBuilder("cctune.models.lora_from_config_json", schema, make);
  }();
  return status;
}

}  // namespace cctune
