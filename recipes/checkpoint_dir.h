// The checkpoint folders of a fine-tune run's output_dir: <output_dir>/step_<N>/ per save and
// LATEST, a one-line file naming the newest complete one. Here: what "complete" means, reading
// LATEST strictly (a resume must never load from outside output_dir or from a half-written
// folder), and removing what failed or killed saves leave behind, since on a full disk those
// leftovers are what blocks the next save.
#ifndef CCTUNE_RECIPES_CHECKPOINT_DIR_H_
#define CCTUNE_RECIPES_CHECKPOINT_DIR_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cctune {

inline constexpr char kLatestFile[] = "LATEST";
inline constexpr char kRecipeStateFile[] = "recipe_state.safetensors";

// "step_<step>": the folder a save after `step` optimizer steps writes.
std::string CheckpointName(int64_t step);

// Whether `dir` is a complete checkpoint: a real folder with config.json and the recipe state,
// which FinishCheckpoint writes only after every weight file.
bool IsCompleteCheckpoint(const std::string& dir);

// The folder LATEST in `output_dir` names, checked: one folder name directly inside output_dir
// (not absolute, no '/', not '.' or '..', no symlink that leads out of output_dir) that exists
// and is complete. NotFound (naming the file) when there is no LATEST; InvalidArgument naming
// the file, its content and the rule otherwise.
absl::StatusOr<std::string> LatestCheckpointDir(const std::string& output_dir);

// Removes from `output_dir` the step_* folders that are neither complete nor named by LATEST,
// and the temporaries of atomic writes (IsAtomicWriteTemporary) in output_dir and in the
// folders kept; never follows a symlink and leaves every other file alone. Call it when no
// save is in flight. Returns the paths removed; an error names the path that could not go.
absl::StatusOr<std::vector<std::string>> RemoveCheckpointLeftovers(const std::string& output_dir);

// After a failed save of checkpoint `name`: removes that folder unless LATEST names it, then
// the leftovers as above, so the last good checkpoint is all that remains.
absl::Status RemoveFailedCheckpoint(const std::string& output_dir, const std::string& name);

}  // namespace cctune

#endif  // CCTUNE_RECIPES_CHECKPOINT_DIR_H_
