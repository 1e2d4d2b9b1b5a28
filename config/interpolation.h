// `${...}` interpolation, OmegaConf style. A string that is exactly one interpolation takes
// the referenced value with its type (an int stays an int, a map is copied); interpolations
// inside longer strings are replaced by the referenced scalar's text ("${output_dir}/logs").
//   ${a.b}, ${list[0]}   absolute keys from the config root
//   ${.sibling}          relative: one leading dot = the referencing node's parent map,
//   ${..uncle}           each further dot one level up
//   \${not_a_ref}        escape: yields the literal text "${not_a_ref}"
// Referenced values are resolved first, so chains work; cycles are reported with the whole
// chain ("interpolation cycle: ${a} -> ${b} -> ${a}").
#ifndef CCTUNE_CONFIG_INTERPOLATION_H_
#define CCTUNE_CONFIG_INTERPOLATION_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "config/node.h"

namespace cctune {

// True when `s` contains "${" (escaped or not): the string needs resolving.
bool HasInterpolation(absl::string_view s);

// Resolves every interpolation under `root`, in place, and returns every problem found
// (missing keys, cycles, malformed or unsupported `${}`), each naming the referencing key and
// its file:line. Nodes that fail keep their unresolved text. Run it once: resolved text that
// came from an escape ("\${x}" -> "${x}") would be read as an interpolation again.
// `failed` (optional) receives the keys that stayed unresolved, including those that only
// failed because what they reference did (those get no error of their own).
std::vector<ConfigError> ResolveInterpolations(ConfigNode* root,
                                               std::vector<std::string>* failed = nullptr);

}  // namespace cctune

#endif  // CCTUNE_CONFIG_INTERPOLATION_H_
