#include "config/value_checks.h"

#include "absl/strings/str_cat.h"

namespace cctune {

absl::Status NonNegative(const ConfigNode& node) {
  if ((node.kind() == ConfigNode::Kind::kInt || node.kind() == ConfigNode::Kind::kFloat) &&
      !(node.float_value() >= 0.0)) {
    return absl::InvalidArgumentError(absl::StrCat("must be >= 0, got ", node.text()));
  }
  return absl::OkStatus();
}

}  // namespace cctune
