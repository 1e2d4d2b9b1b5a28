// Weight-only quantization of a decoder, torchtune's way: the quantizer components
//   cctune.training.quantization.Int8WeightOnlyQuantizer            (no keys)
//   cctune.training.quantization.Int4WeightOnlyQuantizer            groupsize (default 256)
// (also under torchtune.training.quantization.* and torchtune.utils.quantization.*), the
// projection factory that makes every Linear of the decoder (q/k/v/output_proj, w1/w2/w3 and an
// untied output) a QuantizedLinear, and the conversion of a full-precision state dict into the
// quantized one. Embeddings, norms and a tied output (it is the embedding) stay in the run's
// dtype, as torchao's quantizers only replace nn.Linear layers. docs/generation.md,
// "Quantized models".
#ifndef CCTUNE_MODELS_QUANTIZATION_H_
#define CCTUNE_MODELS_QUANTIZATION_H_

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/state_dict.h"
#include "config/node.h"
#include "config/registry.h"
#include "models/decoder_builder.h"
#include "modules/quantized_linear.h"
#include "modules/transformer_decoder.h"

namespace cctune {

using QuantizerRegistryT = Registry<WeightQuantization>;
QuantizerRegistryT& QuantizerRegistry();
// Registers the two quantizers (idempotent, thread-safe).
absl::Status RegisterQuantizers();

// QuantizedLinear (with `q`) for every projection BuildDecoder asks for.
ProjectionFactory QuantizedProjections(const WeightQuantization& q);

// The model component `model_node` (a map with _component_, a decoder builder) built with
// QuantizedProjections(q); `from_checkpoint` as for the model registry.
absl::StatusOr<std::unique_ptr<TransformerDecoder>> BuildQuantizedModel(
    const ConfigNode& model_node, const ConfigNode& from_checkpoint, const WeightQuantization& q);

// `full` (torchtune names, f32/bf16/f16) with the weight of every QuantizedLinear of
// `quantized_model` (a decoder, or any module holding them) replaced by its quantized tensors (<layer>.weight, <layer>.scales and, for
// int4, <layer>.zeros; new CPU tensors); the other tensors are shared, not copied. A source
// weight that views a mapped file has its pages released once quantized
// (Storage::ReleasePages: they re-read from the file), so peak RSS is the quantized weights
// plus one full-precision tensor. Errors name
// the tensor (missing, not 2-D [out, in] float, not contiguous).
absl::StatusOr<StateDict> QuantizeStateDict(const StateDict& full, const Module& quantized_model,
                                            const WeightQuantization& q);

// Checkpoint metadata naming the quantizer: {"quantizer": "Int4WeightOnlyQuantizer",
// "groupsize": "256"} ("groupsize" only for int4).
std::map<std::string, std::string> QuantizationMetadata(const WeightQuantization& q);
// The quantizer a checkpoint's metadata names; nullopt for a full-precision checkpoint (no
// "quantizer" key). `source` names the file in errors (unknown quantizer, bad groupsize).
absl::StatusOr<std::optional<WeightQuantization>> QuantizationFromMetadata(
    const std::map<std::string, std::string>& metadata, const std::string& source);

}  // namespace cctune

#endif  // CCTUNE_MODELS_QUANTIZATION_H_
