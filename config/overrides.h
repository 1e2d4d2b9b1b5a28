// Command-line overrides, as torchtune's `tune run` takes them after the config:
//   a.b=value                 set (creating missing maps; a null parent becomes a map)
//   ~a.b                      delete (the key must exist; `~x._component_` is refused)
//   model=cctune.models.x     when `model` is a component node, sets model._component_
//   model={num_layers: 2}     a map merges into an existing map, key by key
//   key=                      null
// Values are typed like YAML values: null/~, ints, floats, true/false (and yes/no/on/off),
// [flow, lists], {flow: maps}; 'quoted' or "quoted" text stays a string. An unquoted value is
// taken whole (no YAML comments), so prompt.user=Hi: what is 2 # 3? is one string.
// Overrides apply to the unresolved config: `${}` references resolve afterwards.
#ifndef CCTUNE_CONFIG_OVERRIDES_H_
#define CCTUNE_CONFIG_OVERRIDES_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "config/node.h"

namespace cctune {

struct Override {
  enum class Op { kSet, kDelete };
  Op op = Op::kSet;
  std::string key;         // dotted, e.g. "model.num_layers"
  std::string value_text;  // kSet only: the text after the first '='
  std::string text;        // the argument as given, for messages
};

// Parses one argument, or InvalidArgument saying which form was expected.
absl::StatusOr<Override> ParseOverride(absl::string_view arg);

// Types an override value (see above). Nodes get location `loc`.
absl::StatusOr<ConfigNode> ParseOverrideValue(absl::string_view value, const Location& loc);

// Applies one parsed override to `root` (a map); errors name the override and, where it
// matters, the file:line of the config value in the way.
absl::Status ApplyOverride(const Override& o, ConfigNode* root);

// Parses and applies `args` in order. Every bad argument is reported, not only the first.
absl::Status ApplyOverrides(const std::vector<std::string>& args, ConfigNode* root);

// "command-line override 'a.b=1'": the source of values an override sets.
Location OverrideLocation(const Override& o);

}  // namespace cctune

#endif  // CCTUNE_CONFIG_OVERRIDES_H_
