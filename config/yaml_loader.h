// YAML text -> ConfigNode, through yaml-cpp. Every node keeps its file and line (map values
// take the line of their key). Unquoted scalars are typed as torchtune's loader types them
// (see ResolvePlainScalar); quoted scalars and `!!str` stay strings. yaml-cpp exceptions never
// leave this file: syntax errors come back as InvalidArgument naming file:line:column.
#ifndef CCTUNE_CONFIG_YAML_LOADER_H_
#define CCTUNE_CONFIG_YAML_LOADER_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "config/node.h"

namespace cctune {

// Loads a config file. The top level must be a map (an empty file is an empty map). Duplicate
// keys, keys containing '.', '[' or ']', non-scalar keys, unsupported tags and several
// documents in one file are errors.
absl::StatusOr<ConfigNode> LoadYamlFile(const std::string& path);

// As LoadYamlFile, from memory; `source` names the text in locations and errors.
absl::StatusOr<ConfigNode> LoadYamlString(absl::string_view yaml,
                                          const std::string& source = "<string>");

// Parses a single YAML value of any kind ("[1, 2]", "{a: 1}", "'quoted'", "3"), e.g. the value
// of a command-line override. Every resulting node gets the location `loc`.
absl::StatusOr<ConfigNode> ParseYamlValue(absl::string_view text, const Location& loc);

}  // namespace cctune

#endif  // CCTUNE_CONFIG_YAML_LOADER_H_
