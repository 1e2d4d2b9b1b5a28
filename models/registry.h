// The model registry: dotted builder names -> builders, as torchtune's `_component_` paths
// name them. "cctune.models.llama3_2.llama3_2_1b" and "torchtune.models.llama3_2.llama3_2_1b"
// resolve to the same builder. Builders take keyword arguments as strings (the config system
// turns YAML values into them); unknown keys are errors listing the accepted ones.
#ifndef CCTUNE_MODELS_REGISTRY_H_
#define CCTUNE_MODELS_REGISTRY_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "modules/transformer_decoder.h"

namespace cctune {

// Keyword arguments of a builder call: key -> value as written in a config ("true", "32", ...).
using ModelArgs = std::map<std::string, std::string>;
using ModelBuilderFn =
    std::function<absl::StatusOr<std::unique_ptr<TransformerDecoder>>(const ModelArgs& args)>;

struct ModelBuilderInfo {
  std::string name;               // canonical: "cctune.models.<family>.<builder>"
  std::vector<std::string> args;  // accepted keyword arguments
  std::vector<std::string> required_args;
  std::string description;
  ModelBuilderFn build;
};

class ModelRegistry {
 public:
  // The process-wide registry, holding every built-in builder. Register more at start-up.
  static ModelRegistry& Global();

  // AlreadyExists if the name is taken; InvalidArgument unless it starts "cctune.models.".
  absl::Status Register(ModelBuilderInfo info);
  // Accepts the cctune and the torchtune spelling. NotFound lists the known names of the
  // same family (or all families).
  absl::StatusOr<const ModelBuilderInfo*> Find(absl::string_view name) const;
  // Checks the keys against the builder's accepted and required ones, then builds.
  absl::StatusOr<std::unique_ptr<TransformerDecoder>> Build(absl::string_view name,
                                                            const ModelArgs& args = {}) const;
  // Canonical names, sorted.
  std::vector<std::string> Names() const;

 private:
  std::map<std::string, ModelBuilderInfo> builders_;
};

// "torchtune.models.x.y" -> "cctune.models.x.y"; other names unchanged.
std::string CanonicalModelName(absl::string_view name);

// Typed access to builder arguments; errors name the builder, key and value.
absl::StatusOr<int64_t> GetIntArg(const ModelArgs& args, const std::string& key,
                                  int64_t default_value, absl::string_view builder);
absl::StatusOr<double> GetDoubleArg(const ModelArgs& args, const std::string& key,
                                    double default_value, absl::string_view builder);
// true/false, True/False, 1/0.
absl::StatusOr<bool> GetBoolArg(const ModelArgs& args, const std::string& key, bool default_value,
                                absl::string_view builder);

}  // namespace cctune

#endif  // CCTUNE_MODELS_REGISTRY_H_
