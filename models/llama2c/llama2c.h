// llama2.c models (karpathy/llama2.c): the architecture described by a .bin checkpoint's
// 7-int header. RoPE on interleaved pairs with base 10000, RMSNorm eps 1e-5, SwiGLU; the
// classifier shares the embedding when the header's vocab_size is positive (a negative
// vocab_size means an unshared classifier of |vocab_size| rows).
#ifndef CCTUNE_MODELS_LLAMA2C_LLAMA2C_H_
#define CCTUNE_MODELS_LLAMA2C_LLAMA2C_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/llama2c.h"
#include "config/node.h"
#include "models/decoder_builder.h"
#include "modules/transformer_decoder.h"

namespace cctune {

// The header of a llama2.c checkpoint, in file order.
struct Llama2cConfig {
  int32_t dim = 0;
  int32_t hidden_dim = 0;
  int32_t n_layers = 0;
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t vocab_size = 0;  // > 0: shared classifier; < 0: separate classifier
  int32_t seq_len = 0;

  bool shared_classifier() const { return vocab_size > 0; }
  std::string ToString() const;
};

// The decoder's numbers; errors name the header field and value.
absl::StatusOr<DecoderConfig> Llama2cDecoderConfig(const Llama2cConfig& config);
// BuildDecoder(Llama2cDecoderConfig(config)).
absl::StatusOr<std::unique_ptr<TransformerDecoder>> Llama2c(const Llama2cConfig& config);

// The builder keys of a header, typed (what a llama2.c checkpointer passes to the model
// component): dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len.
ConfigNode Llama2cBuilderArgs(const Llama2cConfig& config);
// The same for a .bin file's header (checkpoint/llama2c.h); vocab_size is negative when the
// classifier is separate.
ConfigNode Llama2cBuilderArgs(const Llama2cHeader& header);

// Registers cctune.models.llama2c.llama2c: the header's seven keys, each from the config node
// or else from the checkpoint's header.
absl::Status RegisterLlama2cModels();

}  // namespace cctune

#endif  // CCTUNE_MODELS_LLAMA2C_LLAMA2C_H_
