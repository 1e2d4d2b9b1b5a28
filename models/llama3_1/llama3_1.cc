#include "models/llama3_1/llama3_1.h"

namespace cctune {

DecoderConfig Llama3_1Defaults() {
  DecoderConfig c;
  c.norm_eps = 1e-5f;
  c.rope_base = 500000.0;
  c.rope_scaling = ops::RopeScaling();  // factor 8
  return c;
}

DecoderConfig Llama3_1_8BConfig() {
  return WithSizes(Llama3_1Defaults(), {128256, 32, 32, 8, 4096, 14336, 131072});
}
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama3_1_8B() {
  return BuildDecoder(Llama3_1_8BConfig());
}

DecoderConfig Llama3_1_70BConfig() {
  return WithSizes(Llama3_1Defaults(), {128256, 80, 64, 8, 8192, 28672, 131072});
}
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama3_1_70B() {
  return BuildDecoder(Llama3_1_70BConfig());
}

DecoderConfig Llama3_1_405BConfig() {
  return WithSizes(Llama3_1Defaults(), {128256, 126, 128, 8, 16384, 53248, 131072});
}
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama3_1_405B() {
  return BuildDecoder(Llama3_1_405BConfig());
}

const ModelFamily& Llama3_1Family() {
  static const ModelFamily* const family = new ModelFamily{
      "llama3_1",
      "llama3_1",
      "Llama 3.1",
      /*required_args=*/
      {"vocab_size", "num_layers", "num_heads", "num_kv_heads", "embed_dim", "max_seq_len"},
      /*optional_args=*/
      {"attn_dropout", "rope_base", "intermediate_dim", "norm_eps", "scale_factor"},
      Llama3_1Defaults(),
      /*models=*/
      {
          {"llama3_1_8b", "Llama 3.1 8B", Llama3_1_8BConfig(), {}},
          {"llama3_1_70b", "Llama 3.1 70B", Llama3_1_70BConfig(), {}},
          {"llama3_1_405b", "Llama 3.1 405B", Llama3_1_405BConfig(), {}},
      }};
  return *family;
}

}  // namespace cctune
