#include "recipes/config_checks.h"

#include "absl/strings/str_cat.h"

namespace cctune {

absl::Status AtLeastOne(const ConfigNode& node) {
  if (node.kind() == ConfigNode::Kind::kInt && node.int_value() < 1) {
    return absl::InvalidArgumentError(absl::StrCat("must be >= 1, got ", node.int_value()));
  }
  return absl::OkStatus();
}

absl::Status CpuOnly(const ConfigNode& node) {
  if (node.kind() != ConfigNode::Kind::kString) return absl::OkStatus();
  if (node.string_value() != "cpu") {
    return absl::UnimplementedError(
        absl::StrCat("device '", node.string_value(), "': training runs on cpu only for now"));
  }
  return absl::OkStatus();
}

absl::StatusOr<DType> RecipeDType(const std::string& name) {
  if (name == "fp32") return DType::kF32;
  if (name == "bf16") return DType::kBF16;
  return absl::InvalidArgumentError(absl::StrCat("dtype '", name, "': expected fp32 or bf16"));
}

}  // namespace cctune
