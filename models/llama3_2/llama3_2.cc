#include "models/llama3_2/llama3_2.h"

#include "models/decoder_builder.h"

namespace cctune {

absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama3_2(
    int64_t vocab_size, int64_t num_layers, int64_t num_heads, int64_t num_kv_heads,
    int64_t embed_dim, int64_t max_seq_len, int64_t intermediate_dim, float norm_eps,
    double rope_base, double scale_factor, bool tie_word_embeddings) {
  DecoderConfig c;
  c.vocab_size = vocab_size;
  c.num_layers = num_layers;
  c.num_heads = num_heads;
  c.num_kv_heads = num_kv_heads;
  c.embed_dim = embed_dim;
  c.max_seq_len = max_seq_len;
  c.intermediate_dim = intermediate_dim > 0 ? intermediate_dim : ScaleHiddenDimForMlp(embed_dim);
  c.norm_eps = norm_eps;
  c.rope_base = rope_base;
  ops::RopeScaling scaling;
  scaling.factor = scale_factor;
  c.rope_scaling = scaling;
  c.tie_word_embeddings = tie_word_embeddings;
  return BuildDecoder(c);
}

absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama3_2_1B(bool tie_word_embeddings) {
  return Llama3_2(/*vocab_size=*/128256, /*num_layers=*/16, /*num_heads=*/32,
                  /*num_kv_heads=*/8, /*embed_dim=*/2048, /*max_seq_len=*/131072,
                  /*intermediate_dim=*/8192, /*norm_eps=*/1e-5f, /*rope_base=*/500000.0,
                  /*scale_factor=*/32.0, tie_word_embeddings);
}

absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama3_2_3B(bool tie_word_embeddings) {
  return Llama3_2(128256, 28, 24, 8, 3072, 131072, /*intermediate_dim=*/8192, 1e-5f, 500000.0, 32.0,
                  tie_word_embeddings);
}

}  // namespace cctune
