#include "models/llama2/llama2.h"

#include "models/decoder_builder.h"

namespace cctune {

absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama2(int64_t vocab_size, int64_t num_layers,
                                                           int64_t num_heads, int64_t num_kv_heads,
                                                           int64_t embed_dim, int64_t max_seq_len,
                                                           int64_t intermediate_dim, float norm_eps,
                                                           double rope_base) {
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
  return BuildDecoder(c);
}

absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama2_7B() {
  return Llama2(/*vocab_size=*/32000, /*num_layers=*/32, /*num_heads=*/32, /*num_kv_heads=*/32,
                /*embed_dim=*/4096, /*max_seq_len=*/4096);
}

absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama2_13B() {
  return Llama2(32000, 40, 40, 40, 5120, 4096, /*intermediate_dim=*/13824);
}

absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama2_70B() {
  return Llama2(32000, 80, 64, 8, 8192, 4096, /*intermediate_dim=*/28672);
}

}  // namespace cctune
