#include "recipes/builtin_configs.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "core/status.h"

namespace cctune {

std::vector<EmbeddedConfig> BuiltinConfigs() {
  std::vector<EmbeddedConfig> out(internal::kEmbeddedConfigs,
                                  internal::kEmbeddedConfigs + internal::kNumEmbeddedConfigs);
  std::sort(out.begin(), out.end(), [](const EmbeddedConfig& a, const EmbeddedConfig& b) {
    return std::string(a.name) < std::string(b.name);
  });
  return out;
}

const EmbeddedConfig* FindBuiltinConfig(absl::string_view name) {
  absl::ConsumePrefix(&name, "configs/");
  absl::ConsumeSuffix(&name, ".yaml");
  for (int i = 0; i < internal::kNumEmbeddedConfigs; ++i) {
    if (name == internal::kEmbeddedConfigs[i].name) return &internal::kEmbeddedConfigs[i];
  }
  return nullptr;
}

absl::StatusOr<Config> LoadUnresolvedRecipeConfig(const std::string& name_or_path,
                                                  const std::vector<std::string>& overrides) {
  Config config;
  std::error_code ec;
  if (std::filesystem::is_regular_file(name_or_path, ec)) {
    CCTUNE_ASSIGN_OR_RETURN(config, Config::FromFile(name_or_path));
  } else if (const EmbeddedConfig* builtin = FindBuiltinConfig(name_or_path)) {
    CCTUNE_ASSIGN_OR_RETURN(config, Config::FromString(builtin->yaml, builtin->source));
  } else {
    std::vector<std::string> names;
    for (const EmbeddedConfig& c : BuiltinConfigs()) names.push_back(c.name);
    return absl::NotFoundError(absl::StrCat("config '", name_or_path,
                                            "' is neither a file nor a built-in config (",
                                            absl::StrJoin(names, ", "), ")"));
  }
  CCTUNE_RETURN_IF_ERROR(config.ApplyOverrides(overrides));
  return config;
}

absl::StatusOr<Config> LoadRecipeConfig(const std::string& name_or_path,
                                        const std::vector<std::string>& overrides) {
  CCTUNE_ASSIGN_OR_RETURN(Config config, LoadUnresolvedRecipeConfig(name_or_path, overrides));
  CCTUNE_RETURN_IF_ERROR(config.Resolve());
  return config;
}

}  // namespace cctune
