#include "models/registry.h"

#include <utility>

#include "core/status.h"
#include "models/hf_config/hf_config.h"
#include "models/llama2/llama2.h"
#include "models/llama2c/llama2c.h"
#include "models/llama3/llama3.h"
#include "models/llama3_1/llama3_1.h"
#include "models/llama3_2/llama3_2.h"
#include "models/mistral/mistral.h"
#include "models/qwen2_5/qwen2_5.h"
#include "models/tiny/tiny.h"

namespace cctune {

std::vector<const ModelFamily*> BuiltinModelFamilies() {
  return {&Llama2Family(),  &Llama3Family(),  &Llama3_1Family(), &Llama3_2Family(),
          &MistralFamily(), &Qwen2_5Family(), &TinyFamily()};
}

absl::Status RegisterModelComponents() {
  static const absl::Status status = [] {
    for (const ModelFamily* family : BuiltinModelFamilies()) {
      CCTUNE_RETURN_IF_ERROR(RegisterModelFamily(*family));
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
