#include "models/llama3_2/llama3_2.h"

namespace cctune {

DecoderConfig Llama3_2Defaults() {
  DecoderConfig c;
  c.norm_eps = 1e-5f;
  c.rope_base = 500000.0;
  ops::RopeScaling scaling;
  scaling.factor = 32.0;
  c.rope_scaling = scaling;
  c.tie_word_embeddings = true;
  return c;
}

DecoderConfig Llama3_2_1BConfig(bool tie_word_embeddings) {
  DecoderConfig c = WithSizes(Llama3_2Defaults(), {128256, 16, 32, 8, 2048, 8192, 131072});
  c.tie_word_embeddings = tie_word_embeddings;
  return c;
}
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama3_2_1B(bool tie_word_embeddings) {
  return BuildDecoder(Llama3_2_1BConfig(tie_word_embeddings));
}

DecoderConfig Llama3_2_3BConfig(bool tie_word_embeddings) {
  DecoderConfig c = WithSizes(Llama3_2Defaults(), {128256, 28, 24, 8, 3072, 8192, 131072});
  c.tie_word_embeddings = tie_word_embeddings;
  return c;
}
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama3_2_3B(bool tie_word_embeddings) {
  return BuildDecoder(Llama3_2_3BConfig(tie_word_embeddings));
}

const ModelFamily& Llama3_2Family() {
  static const ModelFamily* const family = new ModelFamily{
      "llama3_2",
      "llama3_2",
      "Llama 3.2",
      /*required_args=*/
      {"vocab_size", "num_layers", "num_heads", "num_kv_heads", "embed_dim", "max_seq_len"},
      /*optional_args=*/
      {"attn_dropout", "rope_base", "intermediate_dim", "norm_eps", "scale_factor",
       "tie_word_embeddings"},
      Llama3_2Defaults(),
      /*models=*/
      {
          {"llama3_2_1b",
           "Llama 3.2 1B (tied output)",
           Llama3_2_1BConfig(),
           {"tie_word_embeddings"}},
          {"llama3_2_3b",
           "Llama 3.2 3B (tied output)",
           Llama3_2_3BConfig(),
           {"tie_word_embeddings"}},
      }};
  return *family;
}

}  // namespace cctune
