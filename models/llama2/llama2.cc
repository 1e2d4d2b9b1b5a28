#include "models/llama2/llama2.h"

namespace cctune {

DecoderConfig Llama2Defaults() {
  DecoderConfig c;
  c.norm_eps = 1e-5f;
  c.rope_base = 10000.0;
  return c;
}

DecoderConfig Llama2_7BConfig() {
  return WithSizes(Llama2Defaults(), {32000, 32, 32, 32, 4096, ScaleHiddenDimForMlp(4096), 4096});
}
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama2_7B() {
  return BuildDecoder(Llama2_7BConfig());
}

DecoderConfig Llama2_13BConfig() {
  return WithSizes(Llama2Defaults(), {32000, 40, 40, 40, 5120, 13824, 4096});
}
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama2_13B() {
  return BuildDecoder(Llama2_13BConfig());
}

DecoderConfig Llama2_70BConfig() {
  return WithSizes(Llama2Defaults(), {32000, 80, 64, 8, 8192, 28672, 4096});
}
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama2_70B() {
  return BuildDecoder(Llama2_70BConfig());
}

const ModelFamily& Llama2Family() {
  static const ModelFamily* const family = new ModelFamily{
      "llama2",
      "llama2",
      "Llama 2",
      /*required_args=*/
      {"vocab_size", "num_layers", "num_heads", "num_kv_heads", "embed_dim", "max_seq_len"},
      /*optional_args=*/{"attn_dropout", "intermediate_dim", "norm_eps"},
      Llama2Defaults(),
      /*models=*/
      {
          {"llama2_7b", "Llama 2 7B", Llama2_7BConfig(), {}},
          {"llama2_13b", "Llama 2 13B", Llama2_13BConfig(), {}},
          {"llama2_70b", "Llama 2 70B (GQA 64/8)", Llama2_70BConfig(), {}},
      }};
  return *family;
}

}  // namespace cctune
