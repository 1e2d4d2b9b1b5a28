#include "recipes/model_components.h"

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace cctune {

namespace {

absl::Status ScalarValue(const ConfigNode& node) {
  if (node.IsScalar() && !node.IsNull()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("model builder arguments are scalars, got ", node.Describe()));
}

// An argument as the builder reads it ("32", "true", "1e-05"; a list as "q_proj,v_proj").
std::string ArgText(const ConfigNode& node) {
  switch (node.kind()) {
    case ConfigNode::Kind::kString:
      return node.string_value();
    case ConfigNode::Kind::kBool:
      return node.bool_value() ? "true" : "false";
    case ConfigNode::Kind::kInt:
      return absl::StrCat(node.int_value());
    case ConfigNode::Kind::kFloat:
      return node.text().empty() ? absl::StrCat(node.float_value()) : node.text();
    case ConfigNode::Kind::kList: {
      std::string out;
      for (const ConfigNode& item : node.items()) {
        if (!out.empty()) out += ",";
        out += ArgText(item);
      }
      return out;
    }
    default:
      return node.text();
  }
}

}  // namespace

ModelComponentRegistryT& ModelComponentRegistry() {
  static ModelComponentRegistryT* const r = new ModelComponentRegistryT("model");
  return *r;
}

absl::Status RegisterModelComponent(const std::string& name, bool list_args) {
  CCTUNE_ASSIGN_OR_RETURN(const ModelBuilderInfo* info, ModelRegistry::Global().Find(name));
  Schema schema("", info->description);
  for (const std::string& arg : info->args) {
    // Required builder arguments may come from the checkpoint, so none is required here;
    // ModelRegistry::Build reports the ones still missing.
    schema.Optional(arg, KeyType::Any(), "builder argument");
    if (!list_args) schema.Check(arg, ScalarValue);
  }
  return ModelComponentRegistry().Register(
      name, std::move(schema),
      [name](const ConfigNode& node, const ModelArgs& from_checkpoint)
          -> absl::StatusOr<std::unique_ptr<TransformerDecoder>> {
        CCTUNE_ASSIGN_OR_RETURN(const ModelBuilderInfo* info, ModelRegistry::Global().Find(name));
        const std::set<std::string> accepted(info->args.begin(), info->args.end());
        ModelArgs args;
        for (const auto& [key, value] : from_checkpoint) {
          if (accepted.count(key) != 0) args[key] = value;
        }
        for (const auto& [key, value] : node.entries()) {
          if (key == "_component_" || value.IsNull()) continue;
          args[key] = ArgText(value);
        }
        return ModelRegistry::Global().Build(name, args);
      });
}

absl::Status RegisterModelComponents() {
  static const absl::Status status = [] {
    for (const std::string& name : ModelRegistry::Global().Names()) {
      CCTUNE_RETURN_IF_ERROR(RegisterModelComponent(name));
    }
    return absl::OkStatus();
  }();
  return status;
}

}  // namespace cctune
