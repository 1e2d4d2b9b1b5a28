// Every built-in model as a config component of kind "model" (models/model_builder.h's
// ModelComponentRegistry): each family from its own folder (models/<family>/<family>.yaml,
// compiled in), the tiny test model, the llama2.c header builder and the config.json builders
// (models/hf_config/). `cctune ls` lists them with their keys.
#ifndef CCTUNE_MODELS_REGISTRY_H_
#define CCTUNE_MODELS_REGISTRY_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "config/node.h"
#include "models/model_builder.h"
#include "modules/transformer_decoder.h"

namespace cctune {

// The families RegisterModelComponents registers: every models/<family>/<family>.yaml, then
// models/tiny. Errors name the family file and line.
absl::StatusOr<std::vector<ModelFamily>> BuiltinModelFamilies();

// Registers every built-in model builder (idempotent, thread-safe).
absl::Status RegisterModelComponents();

// Builds component `name` (either spelling) with builder keys `args` (a map; null: none),
// checked against its schema as a config's model node would be: for C++ callers (benchmarks,
// tools, tests) that name a model without a config file.
absl::StatusOr<std::unique_ptr<TransformerDecoder>> BuildModel(
    absl::string_view name, const ConfigNode& args = ConfigNode(),
    const ConfigNode& from_checkpoint = ConfigNode());

}  // namespace cctune

#endif  // CCTUNE_MODELS_REGISTRY_H_
