#include "config/config.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "config/interpolation.h"
#include "config/overrides.h"
#include "config/yaml_loader.h"
#include "core/status.h"

namespace cctune {

absl::StatusOr<Config> Config::FromNode(ConfigNode root) {
  if (!root.IsMap()) {
    return root.Error(absl::StrCat("the top level of a config must be a map, not ",
                                   root.Describe()));
  }
  root.RefreshPaths("");
  Config config;
  config.raw_ = root;
  config.root_ = std::move(root);
  return config;
}

absl::StatusOr<Config> Config::FromFile(const std::string& path) {
  CCTUNE_ASSIGN_OR_RETURN(ConfigNode root, LoadYamlFile(path));
  CCTUNE_ASSIGN_OR_RETURN(Config config, FromNode(std::move(root)));
  config.path_ = path;
  return config;
}

absl::StatusOr<Config> Config::FromString(absl::string_view yaml, const std::string& source) {
  CCTUNE_ASSIGN_OR_RETURN(ConfigNode root, LoadYamlString(yaml, source));
  return FromNode(std::move(root));
}

absl::Status Config::ApplyOverrides(const std::vector<std::string>& args) {
  const absl::Status status = cctune::ApplyOverrides(args, &raw_);
  root_ = raw_;
  resolved_ = false;
  return status;
}

absl::Status Config::ApplyOverride(absl::string_view arg) {
  return ApplyOverrides({std::string(arg)});
}

std::vector<ConfigError> Config::ResolveCollectingErrors() {
  ConfigNode resolved = raw_;
  std::vector<ConfigError> errors = ResolveInterpolations(&resolved);
  if (errors.empty()) {
    root_ = std::move(resolved);
    resolved_ = true;
  }
  return errors;
}

absl::Status Config::Resolve() { return ErrorsToStatus(ResolveCollectingErrors()); }

absl::StatusOr<Config> LoadConfig(const std::string& path,
                                  const std::vector<std::string>& overrides) {
  CCTUNE_ASSIGN_OR_RETURN(Config config, Config::FromFile(path));
  CCTUNE_RETURN_IF_ERROR(config.ApplyOverrides(overrides));
  CCTUNE_RETURN_IF_ERROR(config.Resolve());
  return config;
}

}  // namespace cctune
