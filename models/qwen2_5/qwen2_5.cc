#include "models/qwen2_5/qwen2_5.h"

namespace cctune {

DecoderConfig Qwen2_5Defaults() {
  DecoderConfig c;
  c.norm_eps = 1e-5f;
  c.rope_base = 1000000.0;
  c.rope_pairing = ops::RopePairing::kHalfSplit;
  c.qkv_bias = true;
  return c;
}

namespace {

// The model builders' shared numbers: sizes in torchtune's order, eps 1e-6.
DecoderConfig Qwen2_5(const DecoderSizes& sizes, bool tie_word_embeddings) {
  DecoderConfig c = WithSizes(Qwen2_5Defaults(), sizes);
  c.norm_eps = 1e-6f;
  c.tie_word_embeddings = tie_word_embeddings;
  return c;
}

}  // namespace

DecoderConfig Qwen2_5_0_5BConfig() {
  return Qwen2_5({151936, 24, 14, 2, 896, 4864, 32768}, /*tie_word_embeddings=*/true);
}
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Qwen2_5_0_5B() {
  return BuildDecoder(Qwen2_5_0_5BConfig());
}

DecoderConfig Qwen2_5_1_5B_BaseConfig() {
  return Qwen2_5({151936, 28, 12, 2, 1536, 8960, 131072}, /*tie_word_embeddings=*/true);
}
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Qwen2_5_1_5B_Base() {
  return BuildDecoder(Qwen2_5_1_5B_BaseConfig());
}

DecoderConfig Qwen2_5_1_5B_InstructConfig() {
  return Qwen2_5({151936, 28, 12, 2, 1536, 8960, 32768}, /*tie_word_embeddings=*/true);
}
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Qwen2_5_1_5B_Instruct() {
  return BuildDecoder(Qwen2_5_1_5B_InstructConfig());
}

DecoderConfig Qwen2_5_3BConfig() {
  return Qwen2_5({151936, 36, 16, 2, 2048, 11008, 32768}, /*tie_word_embeddings=*/true);
}
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Qwen2_5_3B() {
  return BuildDecoder(Qwen2_5_3BConfig());
}

DecoderConfig Qwen2_5_7B_BaseConfig() {
  return Qwen2_5({152064, 28, 28, 4, 3584, 18944, 131072}, /*tie_word_embeddings=*/false);
}
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Qwen2_5_7B_Base() {
  return BuildDecoder(Qwen2_5_7B_BaseConfig());
}

DecoderConfig Qwen2_5_7B_InstructConfig() {
  return Qwen2_5({152064, 28, 28, 4, 3584, 18944, 32768}, /*tie_word_embeddings=*/false);
}
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Qwen2_5_7B_Instruct() {
  return BuildDecoder(Qwen2_5_7B_InstructConfig());
}

const ModelFamily& Qwen2_5Family() {
  static const ModelFamily* const family = new ModelFamily{
      "qwen2_5",
      "qwen2",
      "Qwen 2.5",
      /*required_args=*/
      {"vocab_size", "num_layers", "num_heads", "num_kv_heads", "embed_dim", "intermediate_dim",
       "max_seq_len"},
      /*optional_args=*/
      {"attn_dropout", "norm_eps", "rope_base", "tie_word_embeddings", "q_proj_bias", "k_proj_bias",
       "v_proj_bias", "q_norm", "k_norm"},
      Qwen2_5Defaults(),
      /*models=*/
      {
          {"qwen2_5_0_5b", "Qwen 2.5 0.5B", Qwen2_5_0_5BConfig(), {}},
          {"qwen2_5_1_5b_base", "Qwen 2.5 1.5B base", Qwen2_5_1_5B_BaseConfig(), {}},
          {"qwen2_5_1_5b_instruct", "Qwen 2.5 1.5B instruct", Qwen2_5_1_5B_InstructConfig(), {}},
          {"qwen2_5_3b", "Qwen 2.5 3B", Qwen2_5_3BConfig(), {}},
          {"qwen2_5_7b_base", "Qwen 2.5 7B base", Qwen2_5_7B_BaseConfig(), {}},
          {"qwen2_5_7b_instruct", "Qwen 2.5 7B instruct", Qwen2_5_7B_InstructConfig(), {}},
      }};
  return *family;
}

}  // namespace cctune
