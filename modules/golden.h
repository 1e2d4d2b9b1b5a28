// Test-only access to the torchtune parity fixtures in tests/assets/goldens/ (written by
// tools/golden/gen_torchtune_goldens.py): the configuration from the file's metadata, the
// weights as a state dict ("model." prefix removed) and the inputs/outputs ("io." prefix
// removed).
#ifndef CCTUNE_MODULES_GOLDEN_H_
#define CCTUNE_MODULES_GOLDEN_H_

#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "checkpoint/state_dict.h"
#include "core/tensor.h"
#include "kernels/op_types.h"

namespace cctune {
namespace testing {

struct Golden {
  std::map<std::string, std::string> metadata;
  StateDict weights;  // torchtune state-dict names
  StateDict io;
  std::string path;

  int64_t Int(const std::string& key) const;    // metadata as an integer; aborts if absent
  double Double(const std::string& key) const;  // metadata as a number; aborts if absent
  // RoPE flavour from metadata "rope": default | llama3_scaled | qwen2.
  ops::RopePairing RopePairing() const;
  std::optional<ops::RopeScaling> RopeScaling() const;
  const Tensor& Io(const std::string& name) const;  // aborts if absent
};

// Loads tests/assets/goldens/<name> from the test's runfiles.
absl::StatusOr<Golden> LoadGolden(const std::string& name);

}  // namespace testing
}  // namespace cctune

#endif  // CCTUNE_MODULES_GOLDEN_H_
