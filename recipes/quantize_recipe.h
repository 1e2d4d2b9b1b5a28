// The quantize recipe (torchtune's recipes/quantize.py): load a full-precision checkpoint,
// quantize every Linear of the model with the config's `quantizer`
// (cctune.training.quantization.Int8WeightOnlyQuantizer / Int4WeightOnlyQuantizer) and write
// the quantized state dict atomically to
//   <output_dir>/<first checkpoint file's stem>-<mode>.safetensors      (mode: 8w or 4w)
// in torchtune names, with metadata naming the quantizer (and groupsize) and the model-builder
// arguments the checkpoint fixed. The generate recipe loads it with
// FullModelTorchTuneCheckpointer and the same quantizer. docs/generation.md, "Quantized
// models"; the keys: docs/config_reference.md, "Recipe keys: quantize".
//
//   cctune run quantize --config llama2c/quantization output_dir=/tmp/q
//
// Also here: what the `quantizer` key does to a generate run (BuildModelForCheckpoint).
#ifndef CCTUNE_RECIPES_QUANTIZE_RECIPE_H_
#define CCTUNE_RECIPES_QUANTIZE_RECIPE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/checkpointer_components.h"
#include "config/config.h"
#include "config/node.h"
#include "config/schema.h"
#include "modules/transformer_decoder.h"
#include "recipes/recipe_main.h"

namespace cctune {

const Schema& QuantizeRecipeSchema();
absl::Status RegisterQuantizeComponents();
std::vector<ConfigError> ValidateQuantizeConfig(const Config& config);
absl::Status RunQuantizeRecipe(const Config& config);
const RecipeEntry& QuantizeRecipe();

// The model of `root` ("model", "quantizer" keys, with defaults) for checkpoint `ckpt`:
//  - quantizer null, full-precision checkpoint: the model component as registered;
//  - quantizer set, full-precision checkpoint: a model of QuantizedLinear projections, and
//    ckpt.state_dict quantized in place (quantize at load);
//  - quantizer set, quantized checkpoint (metadata "quantizer"): the same model, the state
//    dict loaded as is; a different quantizer or groupsize is InvalidArgument naming both;
//  - quantizer null, quantized checkpoint: InvalidArgument saying which quantizer to set.
// Logs what it did on stderr.
absl::StatusOr<std::unique_ptr<TransformerDecoder>> BuildModelForCheckpoint(const ConfigNode& root,
                                                                           LoadedCheckpoint& ckpt);

// BuildModelForCheckpoint in its two steps, for a caller that looks at the model before the
// state dict is quantized (the generate recipe may reload the checkpoint with q/k permuted):
// the model alone (the checks above, nothing quantized), then ckpt.state_dict quantized for
// it where the config asks and the checkpoint is full precision (a no-op otherwise).
absl::StatusOr<std::unique_ptr<TransformerDecoder>> BuildModelStructureForCheckpoint(
    const ConfigNode& root, const LoadedCheckpoint& ckpt);
absl::Status QuantizeCheckpointForModel(const ConfigNode& root, const TransformerDecoder& model,
                                        LoadedCheckpoint& ckpt);

}  // namespace cctune

#endif  // CCTUNE_RECIPES_QUANTIZE_RECIPE_H_
