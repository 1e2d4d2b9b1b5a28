// Small value checks and parsers shared by the recipes' config schemas.
#ifndef CCTUNE_RECIPES_CONFIG_CHECKS_H_
#define CCTUNE_RECIPES_CONFIG_CHECKS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "config/node.h"
#include "core/device.h"
#include "core/dtype.h"

namespace cctune {

// Upper bounds of the recipes' integer keys (docs/config_reference.md, "Limits"). Far above
// any real run, and small enough that sums and products of them cannot overflow int64.
inline constexpr int64_t kMaxSeqLenKey = int64_t{1} << 20;      // max_seq_len, max_new_tokens
inline constexpr int64_t kMaxBatchSizeKey = int64_t{1} << 16;   // batch_size, accumulation
inline constexpr int64_t kMaxEpochsKey = int64_t{1} << 20;      // epochs
inline constexpr int64_t kMaxStepsKey = int64_t{1} << 40;       // step counts and periods
inline constexpr int64_t kMaxNumSamplesKey = int64_t{1} << 22;  // generated dataset samples
inline constexpr int64_t kMaxTopKKey = (int64_t{1} << 31) - 1;  // top_k

// Schema check: an int value must be >= 1 (other kinds pass; the schema checks types).
absl::Status AtLeastOne(const ConfigNode& node);
// Schema check for the training recipes' `device`: "cpu", "cuda" or "cuda:N" (the syntax
// only, so a config for a GPU machine validates anywhere).
absl::Status TrainingDeviceName(const ConfigNode& node);
// The training device named by the `device` key, checked usable now: FailedPrecondition
// "device 'cuda': no CUDA device available: <reason>" when the CUDA backend is not linked in,
// the driver fails, or the index is out of range.
absl::StatusOr<Device> TrainingDevice(const std::string& name);
// The recipes' `dtype` key: fp32 or bf16.
absl::StatusOr<DType> RecipeDType(const std::string& name);

}  // namespace cctune

#endif  // CCTUNE_RECIPES_CONFIG_CHECKS_H_
