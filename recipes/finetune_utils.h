// Pieces the fine-tune recipes share: the HF config.json of a model, the dataset-file check
// for `validate`, turning a collated batch into a micro-batch, and the validation loss.
// The run itself is the skeleton (recipes/finetune_recipe.h) on recipes/finetune_loop.h
// (settings, data, step loop, checkpoints).
#ifndef CCTUNE_RECIPES_FINETUNE_UTILS_H_
#define CCTUNE_RECIPES_FINETUNE_UTILS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/hf.h"
#include "config/node.h"
#include "config/validate.h"
#include "core/dtype.h"
#include "data/collate.h"
#include "data/data_loader.h"
#include "modules/parameters.h"
#include "modules/transformer_decoder.h"
#include "training/decoder_trainer.h"
#include "training/train_step.h"

namespace cctune {

// config.json fields of `model`; tied when the arena has no output.weight.
HfModelConfig ModelHfConfig(const TransformerDecoder& model, const ParameterArena& arena,
                            DType dtype);
// An error for the dataset node at `key` whose local data file does not exist.
std::vector<ConfigError> MissingDatasetFiles(const ConfigNode& root, const char* key);
// Tokens, shifted labels and (for packed batches) the block-causal mask and positions.
absl::StatusOr<MicroBatch> ToMicroBatch(const Batch& batch);
// Mean loss per valid label over one pass of `loader`.
absl::StatusOr<double> ValidationLoss(DecoderTrainer& trainer, DataLoader& loader);

}  // namespace cctune

#endif  // CCTUNE_RECIPES_FINETUNE_UTILS_H_
