#include "models/llama2c/llama2c.h"

#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "config/schema.h"
#include "core/status.h"
#include "models/model_builder.h"

namespace cctune {

std::string Llama2cConfig::ToString() const {
  return absl::StrCat("dim=", dim, " hidden_dim=", hidden_dim, " n_layers=", n_layers,
                      " n_heads=", n_heads, " n_kv_heads=", n_kv_heads, " vocab_size=", vocab_size,
                      " seq_len=", seq_len);
}

absl::StatusOr<DecoderConfig> Llama2cDecoderConfig(const Llama2cConfig& h) {
  auto positive = [&](const char* name, int64_t v) -> absl::Status {
    if (v > 0) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("llama2.c header: ", name, " (", v,
                                                   ") must be positive; header: ", h.ToString()));
  };
  CCTUNE_RETURN_IF_ERROR(positive("dim", h.dim));
  CCTUNE_RETURN_IF_ERROR(positive("hidden_dim", h.hidden_dim));
  CCTUNE_RETURN_IF_ERROR(positive("n_layers", h.n_layers));
  CCTUNE_RETURN_IF_ERROR(positive("n_heads", h.n_heads));
  CCTUNE_RETURN_IF_ERROR(positive("n_kv_heads", h.n_kv_heads));
  CCTUNE_RETURN_IF_ERROR(positive("|vocab_size|", std::llabs(h.vocab_size)));
  CCTUNE_RETURN_IF_ERROR(positive("seq_len", h.seq_len));
  if (h.dim % h.n_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "llama2.c header: dim (", h.dim, ") must be divisible by n_heads (", h.n_heads, ")"));
  }
  if (h.n_heads % h.n_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("llama2.c header: n_heads (", h.n_heads,
                                                   ") must be divisible by n_kv_heads (",
                                                   h.n_kv_heads, ")"));
  }
  DecoderConfig c = WithSizes(DecoderConfig(), {std::llabs(h.vocab_size), h.n_layers, h.n_heads,
                                                h.n_kv_heads, h.dim, h.hidden_dim, h.seq_len});
  c.norm_eps = 1e-5f;
  c.rope_base = 10000.0;
  c.rope_pairing = ops::RopePairing::kInterleaved;
  c.tie_word_embeddings = h.shared_classifier();
  return c;
}

absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama2c(const Llama2cConfig& h) {
  CCTUNE_ASSIGN_OR_RETURN(DecoderConfig c, Llama2cDecoderConfig(h));
  return BuildDecoder(c);
}

namespace {

struct HeaderField {
  const char* key;
  int32_t Llama2cConfig::*field;
  const char* doc;
};

constexpr HeaderField kHeaderFields[] = {
    {"dim", &Llama2cConfig::dim, "model width"},
    {"hidden_dim", &Llama2cConfig::hidden_dim, "SwiGLU hidden size"},
    {"n_layers", &Llama2cConfig::n_layers, "layers"},
    {"n_heads", &Llama2cConfig::n_heads, "query heads"},
    {"n_kv_heads", &Llama2cConfig::n_kv_heads, "key/value heads"},
    {"vocab_size", &Llama2cConfig::vocab_size,
     "vocabulary; negative: a classifier separate from the embedding"},
    {"seq_len", &Llama2cConfig::seq_len, "context length"},
};

}  // namespace

ConfigNode Llama2cBuilderArgs(const Llama2cConfig& h) {
  ConfigNode args = ConfigNode::Map();
  for (const HeaderField& f : kHeaderFields) args.Set(f.key, ConfigNode::Int(h.*f.field));
  return args;
}

ConfigNode Llama2cBuilderArgs(const Llama2cHeader& c) {
  Llama2cConfig h;
  h.dim = c.dim;
  h.hidden_dim = c.hidden_dim;
  h.n_layers = c.n_layers;
  h.n_heads = c.n_heads;
  h.n_kv_heads = c.n_kv_heads;
  h.vocab_size = c.shared_classifier ? c.vocab_size : -c.vocab_size;
  h.seq_len = c.seq_len;
  return Llama2cBuilderArgs(h);
}

absl::Status RegisterLlama2cModels() {
  Schema schema("", "any llama2.c checkpoint, from its 7-int header");
  const double limit = std::numeric_limits<int32_t>::max();
  for (const HeaderField& f : kHeaderFields) {
    // Each may come from the checkpoint's header instead, so none is required here.
    schema.Optional(f.key, KeyType::Int().InRange(-limit, limit),
                    absl::StrCat(f.doc, " (default: the checkpoint header's)"));
  }
  return RegisterModelBuilder(
      "cctune.models.llama2c.llama2c", std::move(schema),
      [](const ConfigNode& node, const ConfigNode& header) -> absl::StatusOr<DecoderConfig> {
        Llama2cConfig c;
        std::vector<std::string> missing;
        for (const HeaderField& f : kHeaderFields) {
          const ConfigNode* v = BuilderArg(node, header, f.key);
          if (v == nullptr || v->IsNull()) {
            missing.push_back(f.key);
            continue;
          }
          c.*f.field = static_cast<int32_t>(v->int_value());
        }
        if (!missing.empty()) {
          return absl::InvalidArgumentError(
              absl::StrCat("missing required argument(s) ", absl::StrJoin(missing, ", "),
                           " (give them, or a llama2.c checkpointer whose header has them)"));
        }
        return Llama2cDecoderConfig(c);
      });
}

}  // namespace cctune
