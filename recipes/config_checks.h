// Small value checks and parsers shared by the recipes' config schemas.
#ifndef CCTUNE_RECIPES_CONFIG_CHECKS_H_
#define CCTUNE_RECIPES_CONFIG_CHECKS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "config/key_limits.h"  // the kMax*Key bounds, used with these checks
#include "config/node.h"
#include "core/device.h"
#include "core/dtype.h"

namespace cctune {

// Schema check: an int value must be >= 1 (other kinds pass; the schema checks types).
absl::Status AtLeastOne(const ConfigNode& node);
// Schema check for `log_level`: DEBUG, INFO, WARNING or ERROR in any case (core/log.h).
absl::Status LogLevelKey(const ConfigNode& node);
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
