// Recipe state: the step, epoch, seeds, RNG state, data-loader position and optimizer state
// (hyperparameters and moments) a run needs to resume exactly. One safetensors file holds it:
// the tensors are the optimizer's (moments, f32 master copies), and the RecipeStateProto
// (training/recipe_state.proto) is stored as protobuf text format in the header's metadata
// under "cctune.recipe_state", so the file is self-describing and readable with `head -c`.
// Saving is atomic (temporary file, fsync, rename, directory fsync): a crash leaves the old
// state or the new one. Loading validates everything; errors name the file and the field.
//
//   RecipeState state;
//   state.proto.set_step(step);
//   ...
//   SetOptimizerState(opt->ExportState(), &state);
//   CCTUNE_RETURN_IF_ERROR(SaveRecipeState(dir + "/recipe_state.safetensors", state));
//
//   CCTUNE_ASSIGN_OR_RETURN(RecipeState loaded, LoadRecipeState(path));
//   CCTUNE_ASSIGN_OR_RETURN(OptimizerState o, GetOptimizerState(loaded));
//   CCTUNE_RETURN_IF_ERROR(opt->ImportState(o));
#ifndef CCTUNE_TRAINING_RECIPE_STATE_H_
#define CCTUNE_TRAINING_RECIPE_STATE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/state_dict.h"
#include "core/random.h"
#include "data/data_loader.h"
#include "training/optim.h"
#include "training/recipe_state.pb.h"

namespace cctune {

inline constexpr char kRecipeStateMetadataKey[] = "cctune.recipe_state";
inline constexpr int kRecipeStateFormatVersion = 1;
// Optimizer tensors are stored as "optimizer.<name>".
inline constexpr char kOptimizerTensorPrefix[] = "optimizer.";

struct RecipeState {
  RecipeStateProto proto;
  StateDict tensors;  // after LoadRecipeState: zero-copy views of the mapped file
};

// Puts the optimizer's name, step, hyperparameters and tensors into `state` (replacing any
// earlier optimizer entries). The tensors are referenced, not copied: save before the next step.
void SetOptimizerState(const OptimizerState& optimizer, RecipeState* state);
// The optimizer part of a loaded state, ready for Optimizer::ImportState.
absl::StatusOr<OptimizerState> GetOptimizerState(const RecipeState& state);

// The loader's position, with what it is relative to (shuffle, seed, dataset and batch size,
// drop_last).
DataLoaderPositionProto DataLoaderPositionToProto(const DataLoader& loader);
// Checks that `saved` was taken on a loader configured like `loader` (errors name the field
// and both values; `source` names the file) and moves `loader` to the saved position.
absl::Status RestoreDataLoaderPosition(const DataLoaderPositionProto& saved,
                                       const std::string& source, DataLoader* loader);

RngStateProto RngStateToProto(const Generator& gen);
void RestoreRngState(const RngStateProto& saved, Generator* gen);

// Writes `path` atomically. Sets format_version and tensor_names from `state.tensors`.
absl::Status SaveRecipeState(const std::string& path, const RecipeState& state);

// Reads and validates `path`: the metadata entry, the text format, the version, every count
// (>= 0), and that tensor_names / optimizer.tensor_names match the file's tensors.
absl::StatusOr<RecipeState> LoadRecipeState(const std::string& path);

// The text-format form stored in the file (deterministic: maps sorted by key, doubles exact).
std::string RecipeStateToText(const RecipeStateProto& proto);

}  // namespace cctune

#endif  // CCTUNE_TRAINING_RECIPE_STATE_H_
