// Config: a loaded YAML config with overrides and interpolation, in torchtune's order
//   load file -> apply command-line overrides -> resolve ${} -> read values / validate.
// It keeps the unresolved tree too, so overrides can still be applied after Resolve().
//
//   CCTUNE_ASSIGN_OR_RETURN(Config cfg, LoadConfig("configs/llama2c/generation.yaml", args));
//   CCTUNE_ASSIGN_OR_RETURN(int64_t n, cfg.GetInt("max_new_tokens"));
#ifndef CCTUNE_CONFIG_CONFIG_H_
#define CCTUNE_CONFIG_CONFIG_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "config/node.h"

namespace cctune {

class Config {
 public:
  Config() : raw_(ConfigNode::Map()), root_(ConfigNode::Map()) {}
  // The top level must be a map.
  static absl::StatusOr<Config> FromNode(ConfigNode root);
  static absl::StatusOr<Config> FromFile(const std::string& path);
  static absl::StatusOr<Config> FromString(absl::string_view yaml,
                                           const std::string& source = "<string>");

  // Applies `args` (see overrides.h) to the unresolved tree; every bad one is reported.
  // The config is unresolved afterwards.
  absl::Status ApplyOverrides(const std::vector<std::string>& args);
  absl::Status ApplyOverride(absl::string_view arg);

  // Resolves ${} from the unresolved tree. On failure the error lists every problem and the
  // config stays unresolved.
  absl::Status Resolve();
  // As Resolve, returning the problems one by one (empty = resolved).
  std::vector<ConfigError> ResolveCollectingErrors();
  bool resolved() const { return resolved_; }

  // The tree values are read from: resolved after a successful Resolve(), else unresolved.
  const ConfigNode& root() const { return root_; }
  // The tree as loaded plus overrides, before interpolation.
  const ConfigNode& unresolved() const { return raw_; }
  // The file this config came from ("" when built in memory).
  const std::string& path() const { return path_; }

  // Accessors on root(); see ConfigNode.
  absl::StatusOr<const ConfigNode*> Get(absl::string_view key) const { return root_.Get(key); }
  const ConfigNode* Find(absl::string_view key) const { return root_.Find(key); }
  bool Has(absl::string_view key) const { return root_.Find(key) != nullptr; }
  absl::StatusOr<std::string> GetString(absl::string_view key) const {
    return root_.GetString(key);
  }
  absl::StatusOr<int64_t> GetInt(absl::string_view key) const { return root_.GetInt(key); }
  absl::StatusOr<double> GetFloat(absl::string_view key) const { return root_.GetFloat(key); }
  absl::StatusOr<bool> GetBool(absl::string_view key) const { return root_.GetBool(key); }
  template <typename T>
  absl::StatusOr<std::vector<T>> GetList(absl::string_view key) const {
    return root_.GetList<T>(key);
  }
  template <typename T>
  absl::StatusOr<T> GetAs(absl::string_view key) const {
    return root_.GetAs<T>(key);
  }
  template <typename T>
  absl::StatusOr<std::optional<T>> GetOptional(absl::string_view key) const {
    return root_.GetOptional<T>(key);
  }
  template <typename T>
  absl::StatusOr<T> GetOr(absl::string_view key, T fallback) const {
    return root_.GetOr<T>(key, std::move(fallback));
  }
  absl::StatusOr<std::optional<std::string>> GetOptionalString(absl::string_view key) const {
    return root_.GetOptionalString(key);
  }
  absl::StatusOr<std::optional<int64_t>> GetOptionalInt(absl::string_view key) const {
    return root_.GetOptionalInt(key);
  }
  absl::StatusOr<std::optional<double>> GetOptionalFloat(absl::string_view key) const {
    return root_.GetOptionalFloat(key);
  }
  absl::StatusOr<std::optional<bool>> GetOptionalBool(absl::string_view key) const {
    return root_.GetOptionalBool(key);
  }

  // root() as YAML, e.g. to print the resolved config as recipes do on start-up.
  std::string ToYaml() const { return root_.ToYaml(); }

 private:
  ConfigNode raw_;
  ConfigNode root_;
  bool resolved_ = false;
  std::string path_;
};

// LoadConfig(path, overrides): FromFile, ApplyOverrides, Resolve.
absl::StatusOr<Config> LoadConfig(const std::string& path,
                                  const std::vector<std::string>& overrides = {});

}  // namespace cctune

#endif  // CCTUNE_CONFIG_CONFIG_H_
