#include "models/llama3/llama3.h"

namespace cctune {

DecoderConfig Llama3Defaults() {
  DecoderConfig c;
  c.norm_eps = 1e-5f;
  c.rope_base = 500000.0;
  return c;
}

DecoderConfig Llama3_8BConfig() {
  return WithSizes(Llama3Defaults(), {128256, 32, 32, 8, 4096, 14336, 8192});
}
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama3_8B() {
  return BuildDecoder(Llama3_8BConfig());
}

DecoderConfig Llama3_70BConfig() {
  return WithSizes(Llama3Defaults(), {128256, 80, 64, 8, 8192, 28672, 8192});
}
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama3_70B() {
  return BuildDecoder(Llama3_70BConfig());
}

const ModelFamily& Llama3Family() {
  static const ModelFamily* const family = new ModelFamily{
      "llama3",
      "llama3",
      "Llama 3",
      /*required_args=*/
      {"vocab_size", "num_layers", "num_heads", "num_kv_heads", "embed_dim", "max_seq_len"},
      /*optional_args=*/{"attn_dropout", "rope_base", "intermediate_dim", "norm_eps"},
      Llama3Defaults(),
      /*models=*/
      {
          {"llama3_8b", "Llama 3 8B", Llama3_8BConfig(), {}},
          {"llama3_70b", "Llama 3 70B", Llama3_70BConfig(), {}},
      }};
  return *family;
}

}  // namespace cctune
