#include "models/decoder_builder.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "modules/attention.h"
#include "modules/embedding.h"
#include "modules/feed_forward.h"
#include "modules/linear.h"
#include "modules/rms_norm.h"
#include "modules/rotary_positional_embeddings.h"
#include "modules/tied_linear.h"
#include "modules/transformer_self_attention_layer.h"

namespace cctune {

int64_t ScaleHiddenDimForMlp(int64_t dim, int64_t multiple_of) {
  const int64_t hidden = 4 * static_cast<int64_t>(2.0 * static_cast<double>(dim) / 3.0);
  return multiple_of * ((hidden + multiple_of - 1) / multiple_of);
}

std::string DecoderConfigString(const DecoderConfig& c) {
  return absl::StrCat(
      "vocab_size=", c.vocab_size, " num_layers=", c.num_layers, " num_heads=", c.num_heads,
      " num_kv_heads=", c.num_kv_heads, " embed_dim=", c.embed_dim, " head_dim=", c.head_dim,
      " intermediate_dim=", c.intermediate_dim, " max_seq_len=", c.max_seq_len,
      " norm_eps=", c.norm_eps, " rope_base=", c.rope_base, " rope_pairing=",
      c.rope_pairing == ops::RopePairing::kInterleaved ? "interleaved" : "half_split",
      " rope_scaling=", c.rope_scaling.has_value() ? absl::StrCat(c.rope_scaling->factor) : "none",
      " qkv_bias=", c.qkv_bias, " tie_word_embeddings=", c.tie_word_embeddings);
}

ProjectionFactory LinearProjections() {
  return [](absl::string_view, int64_t in_dim, int64_t out_dim,
            bool bias) -> absl::StatusOr<std::unique_ptr<Linear>> {
    return std::make_unique<Linear>(in_dim, out_dim, bias);
  };
}

DecoderConfig WithSizes(DecoderConfig c, const DecoderSizes& s) {
  c.vocab_size = s.vocab_size;
  c.num_layers = s.num_layers;
  c.num_heads = s.num_heads;
  c.num_kv_heads = s.num_kv_heads;
  c.embed_dim = s.embed_dim;
  c.intermediate_dim = s.intermediate_dim;
  c.max_seq_len = s.max_seq_len;
  return c;
}

absl::StatusOr<std::unique_ptr<TransformerDecoder>> BuildDecoder(
    const DecoderConfig& config, const ProjectionFactory& projections) {
  const ProjectionFactory& make = projections ? projections : LinearProjections();
  DecoderConfig c = config;
  if (c.num_kv_heads == 0) c.num_kv_heads = c.num_heads;
  // Upper bounds far above any published model keep every product of sizes (d * v, the RoPE
  // table s * h_d, ...) inside int64, and stop a config from building 10^9 layers.
  auto positive = [](const char* name, int64_t v, int64_t max) -> absl::Status {
    if (v <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("decoder config: ", name, " (", v, ") must be positive"));
    }
    if (v > max) {
      return absl::InvalidArgumentError(
          absl::StrCat("decoder config: ", name, " (", v, ") must be at most ", max));
    }
    return absl::OkStatus();
  };
  CCTUNE_RETURN_IF_ERROR(positive("vocab_size", c.vocab_size, kMaxDecoderVocabSize));
  CCTUNE_RETURN_IF_ERROR(positive("num_layers", c.num_layers, kMaxDecoderLayers));
  CCTUNE_RETURN_IF_ERROR(positive("num_heads", c.num_heads, kMaxDecoderHeads));
  CCTUNE_RETURN_IF_ERROR(positive("num_kv_heads", c.num_kv_heads, kMaxDecoderHeads));
  CCTUNE_RETURN_IF_ERROR(positive("embed_dim", c.embed_dim, kMaxDecoderWidth));
  CCTUNE_RETURN_IF_ERROR(positive("intermediate_dim", c.intermediate_dim, kMaxDecoderWidth));
  CCTUNE_RETURN_IF_ERROR(positive("max_seq_len", c.max_seq_len, kMaxDecoderSeqLen));
  if (c.head_dim != 0) {
    CCTUNE_RETURN_IF_ERROR(positive("head_dim", c.head_dim, kMaxDecoderWidth));
  }
  if (c.head_dim == 0) {
    if (c.embed_dim % c.num_heads != 0) {
      return absl::InvalidArgumentError(absl::StrCat("decoder config: embed_dim (", c.embed_dim,
                                                     ") must be divisible by num_heads (",
                                                     c.num_heads, ")"));
    }
    c.head_dim = c.embed_dim / c.num_heads;
  }
  if (c.head_dim <= 0 || c.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("decoder config: head_dim (", c.head_dim,
                                                   ") must be positive and even for RoPE"));
  }
  if (!(c.norm_eps > 0.f) || !(c.rope_base > 0.0)) {
    return absl::InvalidArgumentError(absl::StrCat("decoder config: norm_eps (", c.norm_eps,
                                                   ") and rope_base (", c.rope_base,
                                                   ") must be positive"));
  }
  const int64_t d = c.embed_dim, n_h = c.num_heads, n_kv = c.num_kv_heads, h_d = c.head_dim;
  const int64_t f = c.intermediate_dim;

  // One RoPE module shared by every layer (its cos/sin tables are built once).
  auto rope = std::make_shared<RotaryPositionalEmbeddings>(h_d, c.max_seq_len, c.rope_base,
                                                           c.rope_pairing, c.rope_scaling);
  TransformerDecoder::Layers layers;
  layers.reserve(c.num_layers);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    MultiHeadAttentionArgs a;
    a.embed_dim = d;
    a.num_heads = n_h;
    a.num_kv_heads = n_kv;
    a.head_dim = h_d;
    CCTUNE_ASSIGN_OR_RETURN(a.q_proj, make("q_proj", d, n_h * h_d, c.qkv_bias));
    CCTUNE_ASSIGN_OR_RETURN(a.k_proj, make("k_proj", d, n_kv * h_d, c.qkv_bias));
    CCTUNE_ASSIGN_OR_RETURN(a.v_proj, make("v_proj", d, n_kv * h_d, c.qkv_bias));
    CCTUNE_ASSIGN_OR_RETURN(a.output_proj, make("output_proj", n_h * h_d, d, false));
    a.pos_embeddings = rope;
    a.max_seq_len = c.max_seq_len;
    a.is_causal = true;
    CCTUNE_ASSIGN_OR_RETURN(auto attn, MultiHeadAttention::Create(std::move(a)));
    CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<Linear> w1, make("w1", d, f, false));
    CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<Linear> w2, make("w2", f, d, false));
    CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<Linear> w3, make("w3", d, f, false));
    CCTUNE_ASSIGN_OR_RETURN(auto mlp,
                            FeedForward::Create(std::move(w1), std::move(w2), std::move(w3)));
    CCTUNE_ASSIGN_OR_RETURN(
        auto layer, TransformerSelfAttentionLayer::Create(
                        std::move(attn), std::move(mlp), std::make_unique<RMSNorm>(d, c.norm_eps),
                        std::make_unique<RMSNorm>(d, c.norm_eps)));
    layers.push_back(std::move(layer));
  }
  auto tok_embeddings = std::make_unique<Embedding>(c.vocab_size, d);
  std::unique_ptr<Projection> output;
  if (c.tie_word_embeddings) {
    output = std::make_unique<TiedLinear>(tok_embeddings.get());
  } else {
    CCTUNE_ASSIGN_OR_RETURN(output, make("output", d, c.vocab_size, false));
  }
  return TransformerDecoder::Create(std::move(tok_embeddings), std::move(layers),
                                    std::make_unique<RMSNorm>(d, c.norm_eps), std::move(output),
                                    c.max_seq_len);
}

}  // namespace cctune
