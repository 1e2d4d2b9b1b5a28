// The built-in configs (configs/**/*.yaml, embedded into the binary at build time) and how a
// recipe finds its --config: an existing file path first, else a built-in name such as
// "llama2c/generation" (also accepted: "llama2c/generation.yaml",
// "configs/llama2c/generation.yaml").
#ifndef CCTUNE_RECIPES_BUILTIN_CONFIGS_H_
#define CCTUNE_RECIPES_BUILTIN_CONFIGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "config/config.h"

namespace cctune {

struct EmbeddedConfig {
  const char* name;    // "llama2c/generation"
  const char* source;  // "configs/llama2c/generation.yaml" (for messages)
  const char* yaml;
};

// Every built-in config, sorted by name.
std::vector<EmbeddedConfig> BuiltinConfigs();
// The built-in config called `name`, or nullptr.
const EmbeddedConfig* FindBuiltinConfig(absl::string_view name);

// Loads `name_or_path` (file or built-in name), applies `overrides` and resolves ${}. A name
// that is neither is NotFound listing the built-in names.
absl::StatusOr<Config> LoadRecipeConfig(const std::string& name_or_path,
                                        const std::vector<std::string>& overrides);
// As LoadRecipeConfig without resolving (Validate resolves a copy and reports every problem).
absl::StatusOr<Config> LoadUnresolvedRecipeConfig(const std::string& name_or_path,
                                                  const std::vector<std::string>& overrides);

namespace internal {
extern const EmbeddedConfig kEmbeddedConfigs[];
extern const int kNumEmbeddedConfigs;
}  // namespace internal

}  // namespace cctune

#endif  // CCTUNE_RECIPES_BUILTIN_CONFIGS_H_
