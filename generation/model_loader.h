// Putting checkpoint weights into a built model: one ParameterArena in the requested dtype on
// the requested device, filled from a StateDict (copying and converting as needed), and the
// llama2.c path (a .bin file -> model + weights) that the llama2.c-compatible tools use.
#ifndef CCTUNE_GENERATION_MODEL_LOADER_H_
#define CCTUNE_GENERATION_MODEL_LOADER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "checkpoint/state_dict.h"
#include "core/device.h"
#include "core/dtype.h"
#include "checkpoint/llama2c.h"
#include "config/node.h"
#include "modules/parameters.h"
#include "modules/transformer_decoder.h"

namespace cctune {

// A model with its weights. The arena owns the parameter memory the model's views point at.
struct LoadedModel {
  std::unique_ptr<TransformerDecoder> model;
  ParameterArena arena;
};

// Lays out `model`'s parameters in `dtype` on `device` and loads `state_dict` into them
// (strict: missing, unexpected and mis-shaped tensors are errors naming them). An
// "output.weight" that is the same tensor as "tok_embeddings.weight" (a checkpoint's alias of
// a tied classifier) is ignored when the model ties its output itself.
// With view_checkpoint (inference), ParameterArena::CreateViewing: tensors of the state dict
// already in `dtype` on `device` are not copied but viewed (one copy of the weights in memory,
// the mapped file's), and the rest are converted, releasing each mapped tensor's pages after.
// With view_checkpoint and view_mapped_files false, only tensors in memory of their own (not
// in a mapped file, e.g. weights quantized at load) are viewed; the files' are copied.
absl::StatusOr<ParameterArena> LoadWeights(TransformerDecoder& model, const StateDict& state_dict,
                                           DType dtype, const Device& device,
                                           bool view_checkpoint = false,
                                           bool view_mapped_files = true);

// For a checkpoint loaded with keep_qk_layout whose qk_half_split is set: makes every
// attention layer of `model` rotate half-split pairs where it rotated interleaved ones, which
// with q/k as stored gives the interleaved model's attention scores (and logits) with the
// permuted weights. Returns false, changing nothing, when some layer's RoPE already rotates
// half-split pairs (the weights must then be permuted: load without keep_qk_layout). A model
// without RoPE needs nothing either way (true).
bool UseHalfSplitRope(TransformerDecoder& model);

// The builder keys of "cctune.models.llama2c.llama2c" for a .bin file's llama2.c header, typed
// (a map: dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size (negative when the
// classifier is separate), seq_len; Llama2cBuilderArgs of models/llama2c/llama2c.h).
absl::StatusOr<ConfigNode> Llama2cModelArgs(const std::string& bin_path);

// Reads a llama2.c .bin file, builds its model and loads the weights.
absl::StatusOr<LoadedModel> LoadLlama2cModel(const std::string& bin_path, DType dtype = DType::kF32,
                                             const Device& device = Device::Cpu());

}  // namespace cctune

#endif  // CCTUNE_GENERATION_MODEL_LOADER_H_
