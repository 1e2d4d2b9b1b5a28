#include "models/qwen2_5/qwen2_5.h"

#include "models/decoder_builder.h"

namespace cctune {

absl::StatusOr<std::unique_ptr<TransformerDecoder>> Qwen2(
    int64_t vocab_size, int64_t num_layers, int64_t num_heads, int64_t num_kv_heads,
    int64_t embed_dim, int64_t intermediate_dim, int64_t max_seq_len, float norm_eps,
    double rope_base, bool tie_word_embeddings) {
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
  c.rope_pairing = ops::RopePairing::kHalfSplit;
  c.qkv_bias = true;
  c.tie_word_embeddings = tie_word_embeddings;
  return BuildDecoder(c);
}

// Argument order: vocab_size, num_layers, num_heads, num_kv_heads, embed_dim,
// intermediate_dim, max_seq_len, norm_eps, rope_base, tie_word_embeddings.
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Qwen2_5_0_5B() {
  return Qwen2(151936, 24, 14, 2, 896, 4864, 32768, 1e-6f, 1000000.0, true);
}

absl::StatusOr<std::unique_ptr<TransformerDecoder>> Qwen2_5_1_5B_Base() {
  return Qwen2(151936, 28, 12, 2, 1536, 8960, 131072, 1e-6f, 1000000.0, true);
}

absl::StatusOr<std::unique_ptr<TransformerDecoder>> Qwen2_5_1_5B_Instruct() {
  return Qwen2(151936, 28, 12, 2, 1536, 8960, 32768, 1e-6f, 1000000.0, true);
}

absl::StatusOr<std::unique_ptr<TransformerDecoder>> Qwen2_5_3B() {
  return Qwen2(151936, 36, 16, 2, 2048, 11008, 32768, 1e-6f, 1000000.0, true);
}

absl::StatusOr<std::unique_ptr<TransformerDecoder>> Qwen2_5_7B_Base() {
  return Qwen2(152064, 28, 28, 4, 3584, 18944, 131072, 1e-6f, 1000000.0, false);
}

absl::StatusOr<std::unique_ptr<TransformerDecoder>> Qwen2_5_7B_Instruct() {
  return Qwen2(152064, 28, 28, 4, 3584, 18944, 32768, 1e-6f, 1000000.0, false);
}

}  // namespace cctune
