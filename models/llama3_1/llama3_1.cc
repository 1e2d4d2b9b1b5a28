#include "models/llama3_1/llama3_1.h"

#include "models/decoder_builder.h"

namespace cctune {

absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama3_1(
    int64_t vocab_size, int64_t num_layers, int64_t num_heads, int64_t num_kv_heads,
    int64_t embed_dim, int64_t max_seq_len, int64_t intermediate_dim, float norm_eps,
    double rope_base, double scale_factor) {
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
  ops::RopeScaling scaling;  // low_freq_factor 1, high_freq_factor 4, original context 8192
  scaling.factor = scale_factor;
  c.rope_scaling = scaling;
  return BuildDecoder(c);
}

absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama3_1_8B() {
  return Llama3_1(/*vocab_size=*/128256, /*num_layers=*/32, /*num_heads=*/32,
                  /*num_kv_heads=*/8, /*embed_dim=*/4096, /*max_seq_len=*/131072,
                  /*intermediate_dim=*/14336);
}

absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama3_1_70B() {
  return Llama3_1(128256, 80, 64, 8, 8192, 131072, /*intermediate_dim=*/28672);
}

absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama3_1_405B() {
  return Llama3_1(128256, 126, 128, 8, 16384, 131072, /*intermediate_dim=*/53248);
}

}  // namespace cctune
