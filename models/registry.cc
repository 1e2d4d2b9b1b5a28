#include "models/registry.h"

#include <utility>

#include "core/status.h"
#include "models/embedded_families.h"
#include "models/hf_config/hf_config.h"
#include "models/llama2c/llama2c.h"
#include "models/tiny/tiny.h"

namespace cctune {

absl::StatusOr<std::vector<ModelFamily>> BuiltinModelFamilies() {
  std::vector<ModelFamily> families;
  for (int i = 0; i < internal::kNumEmbeddedFamilies; ++i) {
    const EmbeddedFamily& e = internal::kEmbeddedFamilies[i];
    CCTUNE_ASSIGN_OR_RETURN(ModelFamily f, ParseModelFamily(e.yaml, e.path));
    families.push_back(std::move(f));
  }
  families.push_back(TinyFamily());
  return families;
}

absl::Status RegisterModelComponents() {
  static const absl::Status status = [] {
    CCTUNE_ASSIGN_OR_RETURN(std::vector<ModelFamily> families, BuiltinModelFamilies());
    for (const ModelFamily& family : families) {
      CCTUNE_RETURN_IF_ERROR(RegisterModelFamily(family));
    }
    CCTUNE_RETURN_IF_ERROR(RegisterLlama2cModels());
    return RegisterHfConfigModels();
  }();
  return status;
}

absl::StatusOr<std::unique_ptr<TransformerDecoder>> BuildModel(absl::string_view name,
                                                               const ConfigNode& args,
                                                               const ConfigNode& from_checkpoint) {
  CCTUNE_RETURN_IF_ERROR(RegisterModelComponents());
  ConfigNode node = args.IsMap() ? args : ConfigNode::Map();
  node.Set("_component_", ConfigNode::String(std::string(name)));
  return ModelComponentRegistry().Instantiate(node, from_checkpoint);
}

}  // namespace cctune
