// The wiring every Llama-family component builder shares: token embedding, num_layers
// pre-norm self-attention blocks (GQA + RoPE + SwiGLU), final RMSNorm, output projection
// (tied or not). Family builders (models/<family>/) only choose the RoPE flavour, biases,
// eps and defaults, as torchtune's _component_builders do.
#ifndef CCTUNE_MODELS_DECODER_BUILDER_H_
#define CCTUNE_MODELS_DECODER_BUILDER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/op_types.h"
#include "modules/transformer_decoder.h"

namespace cctune {

// Largest sizes BuildDecoder accepts (docs/config_reference.md, "Limits").
inline constexpr int64_t kMaxDecoderVocabSize = int64_t{1} << 24;
inline constexpr int64_t kMaxDecoderLayers = 4096;
inline constexpr int64_t kMaxDecoderHeads = 4096;
inline constexpr int64_t kMaxDecoderWidth = int64_t{1} << 20;  // embed, intermediate, head dims
inline constexpr int64_t kMaxDecoderSeqLen = int64_t{1} << 24;

struct DecoderConfig {
  int64_t vocab_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;  // 0 means num_heads
  int64_t embed_dim = 0;
  int64_t head_dim = 0;  // 0 means embed_dim / num_heads
  int64_t intermediate_dim = 0;
  int64_t max_seq_len = 4096;
  float norm_eps = 1e-5f;
  double rope_base = 10000.0;
  ops::RopePairing rope_pairing = ops::RopePairing::kInterleaved;
  std::optional<ops::RopeScaling> rope_scaling;
  bool qkv_bias = false;             // Qwen2: biases on q_proj, k_proj, v_proj
  bool tie_word_embeddings = false;  // output = TiedLinear(tok_embeddings)
};

// Checks the numbers (each error names the field and value) and builds the decoder. No
// memory is allocated for parameters: create a ParameterArena on the result.
absl::StatusOr<std::unique_ptr<TransformerDecoder>> BuildDecoder(const DecoderConfig& config);

// torchtune's scale_hidden_dim_for_mlp: 4 * int(2 * dim / 3), rounded up to `multiple_of`.
int64_t ScaleHiddenDimForMlp(int64_t dim, int64_t multiple_of = 256);

// One line describing the config, for logs and error messages.
std::string DecoderConfigString(const DecoderConfig& config);

}  // namespace cctune

#endif  // CCTUNE_MODELS_DECODER_BUILDER_H_
