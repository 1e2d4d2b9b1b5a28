#include "models/mistral/mistral.h"

namespace cctune {

DecoderConfig MistralDefaults() {
  DecoderConfig c;
  c.norm_eps = 1e-5f;
  c.rope_base = 10000.0;
  return c;
}

DecoderConfig Mistral_7BConfig() {
  return WithSizes(MistralDefaults(), {32000, 32, 32, 8, 4096, 14336, 32768});
}
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Mistral_7B() {
  return BuildDecoder(Mistral_7BConfig());
}

const ModelFamily& MistralFamily() {
  static const ModelFamily* const family =
      new ModelFamily{"mistral",
                      "mistral",
                      "Mistral",
                      /*required_args=*/
                      {"vocab_size", "num_layers", "num_heads", "num_kv_heads", "embed_dim",
                       "intermediate_dim", "max_seq_len"},
                      /*optional_args=*/{"attn_dropout", "norm_eps", "rope_base"},
                      MistralDefaults(),
                      /*models=*/
                      {
                          {"mistral_7b", "Mistral 7B", Mistral_7BConfig(), {}},
                      }};
  return *family;
}

}  // namespace cctune
