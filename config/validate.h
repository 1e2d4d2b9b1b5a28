// Validate(): checks a whole config against a recipe's top-level Schema and every component
// node against its registered Schema, without building anything, and reports every problem at
// once (unknown keys with the accepted ones, missing required keys, wrong types, unknown or
// wrong-kind components, failed ${} references), each with file:line and key.
#ifndef CCTUNE_CONFIG_VALIDATE_H_
#define CCTUNE_CONFIG_VALIDATE_H_

#include <vector>

#include "absl/strings/string_view.h"
#include "config/catalog.h"
#include "config/config.h"
#include "config/node.h"
#include "config/schema.h"

namespace cctune {

// Every problem of `config` (resolved, or resolved here on a copy) against `recipe_schema`,
// sorted by file and line. Empty = valid. ErrorsToStatus() turns it into one Status.
std::vector<ConfigError> Validate(const Config& config, const Schema& recipe_schema,
                                  const ComponentCatalog& catalog = ComponentCatalog::Global());

// Checks the map `node` against `schema`, appending to `errors`. `is_component` accepts the
// `_component_` key. Nested objects and components are checked too.
void CheckAgainstSchema(const ConfigNode& node, const Schema& schema,
                        const ComponentCatalog& catalog, std::vector<ConfigError>* errors,
                        bool is_component = false);

// Checks a component node: a map whose `_component_` string names a registered component of
// `kind` ("" = any kind), with keys that fit that component's Schema.
void CheckComponent(const ConfigNode& node, absl::string_view kind,
                    const ComponentCatalog& catalog, std::vector<ConfigError>* errors);

// `node` with each absent key that has a default set to it (also inside Object keys).
// Defaults get the location "default of 'key' in <schema name>".
ConfigNode WithDefaults(const ConfigNode& node, const Schema& schema);

}  // namespace cctune

#endif  // CCTUNE_CONFIG_VALIDATE_H_
