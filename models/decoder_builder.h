// The wiring every Llama-family model shares: token embedding, num_layers pre-norm
// self-attention blocks (GQA + RoPE + SwiGLU), final RMSNorm, output projection (tied or not).
// Families (models/<family>/) only choose numbers, the RoPE flavour, biases and defaults; a
// ProjectionFactory chooses what each projection is (Linear, or LoRALinear for the lora_
// builders: models/lora.h LoRAProjections), as torchtune's component builders do.
#ifndef CCTUNE_MODELS_DECODER_BUILDER_H_
#define CCTUNE_MODELS_DECODER_BUILDER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/op_types.h"
#include "modules/linear.h"
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

// Makes one projection of the decoder: `name` is its torchtune name within its block
// (q_proj, k_proj, v_proj, output_proj in attention; w1, w2, w3 in the MLP; output for the
// final projection, never asked for when the output is tied). Errors name the projection.
using ProjectionFactory = std::function<absl::StatusOr<std::unique_ptr<Linear>>(
    absl::string_view name, int64_t in_dim, int64_t out_dim, bool bias)>;

// Plain Linear for every projection.
ProjectionFactory LinearProjections();

// Checks the numbers (each error names the field and value) and builds the decoder with
// `projections` (LinearProjections() when empty). No memory is allocated for parameters:
// create a ParameterArena on the result.
absl::StatusOr<std::unique_ptr<TransformerDecoder>> BuildDecoder(
    const DecoderConfig& config, const ProjectionFactory& projections = nullptr);

// Sizes in torchtune's component-builder order, for writing a model builder's numbers once.
struct DecoderSizes {
  int64_t vocab_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t embed_dim = 0;
  int64_t intermediate_dim = 0;
  int64_t max_seq_len = 0;
};
// `family_defaults` with `sizes` written over it.
DecoderConfig WithSizes(DecoderConfig family_defaults, const DecoderSizes& sizes);

// torchtune's scale_hidden_dim_for_mlp: 4 * int(2 * dim / 3), rounded up to `multiple_of`.
int64_t ScaleHiddenDimForMlp(int64_t dim, int64_t multiple_of = 256);

// One line describing the config, for logs and error messages.
std::string DecoderConfigString(const DecoderConfig& config);

}  // namespace cctune

#endif  // CCTUNE_MODELS_DECODER_BUILDER_H_
