// Value checks shared by the components' and the recipes' config schemas
// (Schema::Check(key, check)); config/key_limits.h holds the integer keys' bounds.
#ifndef CCTUNE_CONFIG_VALUE_CHECKS_H_
#define CCTUNE_CONFIG_VALUE_CHECKS_H_

#include "absl/status/status.h"
#include "config/node.h"

namespace cctune {

// Schema check: a number must be >= 0 (NaN is refused; other kinds pass, the schema checks
// types).
absl::Status NonNegative(const ConfigNode& node);

}  // namespace cctune

#endif  // CCTUNE_CONFIG_VALUE_CHECKS_H_
