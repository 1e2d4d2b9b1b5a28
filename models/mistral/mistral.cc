#include "models/mistral/mistral.h"

#include "models/decoder_builder.h"

namespace cctune {

absl::StatusOr<std::unique_ptr<TransformerDecoder>> Mistral(int64_t vocab_size, int64_t num_layers,
                                                            int64_t num_heads, int64_t num_kv_heads,
                                                            int64_t embed_dim,
                                                            int64_t intermediate_dim,
                                                            int64_t max_seq_len, float norm_eps,
                                                            double rope_base) {
  DecoderConfig c;
  c.vocab_size = vocab_size;
  c.num_layers = num_layers;
  c.num_heads = num_heads;
  c.num_kv_heads = num_kv_heads;
  c.embed_dim = embed_dim;
  c.intermediate_dim = intermediate_dim;
  c.max_seq_len = max_seq_len;
  c.norm_eps = norm_eps;
  c.rope_base = rope_base;
  return BuildDecoder(c);
}

absl::StatusOr<std::unique_ptr<TransformerDecoder>> Mistral_7B() {
  return Mistral(/*vocab_size=*/32000, /*num_layers=*/32, /*num_heads=*/32, /*num_kv_heads=*/8,
                 /*embed_dim=*/4096, /*intermediate_dim=*/14336, /*max_seq_len=*/32768);
}

}  // namespace cctune
