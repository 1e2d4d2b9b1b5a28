#include "models/llama2c/llama2c.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "models/decoder_builder.h"

namespace cctune {

std::string Llama2cConfig::ToString() const {
  return absl::StrCat("dim=", dim, " hidden_dim=", hidden_dim, " n_layers=", n_layers,
                      " n_heads=", n_heads, " n_kv_heads=", n_kv_heads, " vocab_size=", vocab_size,
                      " seq_len=", seq_len);
}

absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama2c(const Llama2cConfig& h) {
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
  DecoderConfig c;
  c.vocab_size = std::llabs(h.vocab_size);
  c.num_layers = h.n_layers;
  c.num_heads = h.n_heads;
  c.num_kv_heads = h.n_kv_heads;
  c.embed_dim = h.dim;
  c.intermediate_dim = h.hidden_dim;
  c.max_seq_len = h.seq_len;
  c.norm_eps = 1e-5f;
  c.rope_base = 10000.0;
  c.rope_pairing = ops::RopePairing::kInterleaved;
  c.tie_word_embeddings = h.shared_classifier();
  return BuildDecoder(c);
}

}  // namespace cctune
