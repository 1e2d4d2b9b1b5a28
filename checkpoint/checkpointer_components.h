// Checkpointer components for recipes, named as torchtune names them:
//   cctune.training.FullModelHFCheckpointer   (torchtune.training.FullModelHFCheckpointer,
//                                              torchtune.utils.FullModelHFCheckpointer)
//   cctune.training.Llama2cCheckpointer       (a llama2.c .bin file)
//   cctune.training.FullModelTorchTuneCheckpointer (torchtune.training.FullModelTorchTuneCheckpointer,
//                                              torchtune.utils.FullModelTorchTuneCheckpointer):
//                                              safetensors files already in torchtune names, as
//                                              the quantize recipe writes them
// A checkpointer loads a StateDict in torchtune names, plus the model-builder arguments the
// checkpoint itself determines (a llama2.c header fixes the architecture).
#ifndef CCTUNE_CHECKPOINT_CHECKPOINTER_COMPONENTS_H_
#define CCTUNE_CHECKPOINT_CHECKPOINTER_COMPONENTS_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/state_dict.h"
#include "config/registry.h"
#include "config/node.h"
#include "modules/transformer_decoder.h"

namespace cctune {

// The sizes a checkpoint states for the model it holds (config.json, a llama2.c header); 0 =
// not stated. Tensor shapes alone do not fix them: q_proj is [d, d] for 8 heads of 16 and for
// 4 heads of 32, so a model built with other head counts loads and writes wrong text.
struct CheckpointModelSizes {
  std::string source;  // where they were read, for messages
  int64_t vocab_size = 0;
  int64_t embed_dim = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
};

struct LoadedCheckpoint {
  StateDict state_dict;  // torchtune names; may be zero-copy views on mapped files
  // Builder keys implied by the checkpoint, typed (a map: a llama2.c header's seven ints; an
  // HF checkpoint's checkpoint_dir and model_type for cctune.models.from_config_json); the model component
  // uses them for keys its config node leaves out.
  ConfigNode model_args = ConfigNode::Map();
  std::vector<std::string> files;  // what was read
  CheckpointModelSizes sizes;
  // The files' safetensors __metadata__ (FullModelTorchTuneCheckpointer; e.g. the quantizer a
  // quantized checkpoint was made with, models/quantization.h).
  std::map<std::string, std::string> metadata;
  // Loaded with keep_qk_layout from an HF checkpoint that a model rotating interleaved pairs
  // would have had permuted: q/k rows are in the file's half-split (rotate_half) order, so the
  // model must rotate half-split pairs (generation/model_loader.h UseHalfSplitRope).
  bool qk_half_split = false;
};

struct CheckpointLoadOptions {
  // Leave HF q/k weights in the file's half-split order instead of permuting them to the
  // interleaved order at load (a copy of every q/k matrix): the tensors stay zero-copy views
  // of the mapped files, and LoadedCheckpoint::qk_half_split says what the model must do.
  // Attention scores are invariant to one permutation applied to both q and k head dims, so
  // the logits match the permuted path. For inference; training and saving keep the default.
  bool keep_qk_layout = false;
};

// InvalidArgument naming both values when `model` (built from the config's model node)
// disagrees with a size the checkpoint states.
absl::Status CheckModelMatchesCheckpoint(const TransformerDecoder& model,
                                         const LoadedCheckpoint& checkpoint);

class Checkpointer {
 public:
  virtual ~Checkpointer() = default;
  absl::StatusOr<LoadedCheckpoint> LoadCheckpoint() { return Load(CheckpointLoadOptions()); }
  absl::StatusOr<LoadedCheckpoint> LoadCheckpoint(const CheckpointLoadOptions& options) {
    return Load(options);
  }

 protected:
  virtual absl::StatusOr<LoadedCheckpoint> Load(const CheckpointLoadOptions& options) = 0;
};

using CheckpointerRegistryT = Registry<std::unique_ptr<Checkpointer>>;
// Component kind "checkpointer".
CheckpointerRegistryT& CheckpointerRegistry();

// Appends an error for each file of a checkpointer node (checkpoint_dir + checkpoint_files)
// that does not exist. Validate() checks keys and types only; recipes call this too so that a
// missing checkpoint is reported before anything is loaded.
void CheckCheckpointFilesExist(const ConfigNode& checkpointer, std::vector<ConfigError>* errors);

// torchtune's checkpointer.output_dir is where the checkpointer saves; cctune's recipes save
// to their top-level output_dir. Appends an error naming both when `root` sets both and they
// differ (trailing '/' and "./" aside), so that a checkpointer output_dir never goes unused.
void CheckCheckpointerOutputDir(const ConfigNode& root, std::vector<ConfigError>* errors);

// A recipe's checks of the `checkpointer` of its resolved config `root`: its files
// (CheckCheckpointFilesExist, when it is a map) and its output_dir (CheckCheckpointerOutputDir).
void CheckRecipeCheckpointer(const ConfigNode& root, std::vector<ConfigError>* errors);

// Registers the checkpointers above (idempotent, thread-safe).
absl::Status RegisterCheckpointers();

}  // namespace cctune

#endif  // CCTUNE_CHECKPOINT_CHECKPOINTER_COMPONENTS_H_
