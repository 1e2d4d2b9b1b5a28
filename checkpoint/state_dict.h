// The interface between checkpoint loaders/savers and models: a map from torchtune parameter
// names (tok_embeddings.weight, layers.0.attn.q_proj.weight, layers.0.sa_norm.scale, ...,
// norm.scale, output.weight) to tensors. Loaders fill it, models copy from / view into it.
#ifndef CCTUNE_CHECKPOINT_STATE_DICT_H_
#define CCTUNE_CHECKPOINT_STATE_DICT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace cctune {

// Sorted by name, so iteration order (and anything written from it) is deterministic.
using StateDict = std::map<std::string, Tensor>;

// The tensor called `name`, or NotFound naming it (`what` says whose state dict it is).
absl::StatusOr<Tensor> GetTensor(const StateDict& sd, const std::string& name,
                                 const std::string& what = "state dict");

// OK when `sd` holds exactly the names in `expected`; otherwise InvalidArgument listing the
// missing and the unexpected names (the first few of each, with counts).
absl::Status CheckStateDictKeys(const StateDict& sd, const std::vector<std::string>& expected,
                                const std::string& what = "state dict");

// Sum of nbytes() over all tensors (tensors sharing storage are counted each time).
int64_t StateDictBytes(const StateDict& sd);

}  // namespace cctune

#endif  // CCTUNE_CHECKPOINT_STATE_DICT_H_
