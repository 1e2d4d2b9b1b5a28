// ComponentCatalog: every registered `_component_` name with its kind ("model", "tokenizer",
// ...) and Schema, whatever C++ type its factory builds. Registries (registry.h) add to it;
// Validate() reads it, so a whole config can be checked without building anything.
//
// Name resolution, in order:
//   1. a registered name ("cctune.models.llama3_2.llama3_2_1b");
//   2. an explicit alias (AddAlias);
//   3. torchtune's spelling: "torchtune.<rest>" is looked up as "cctune.<rest>" (then as an
//      alias), so torchtune configs run with only their paths changed.
#ifndef CCTUNE_CONFIG_CATALOG_H_
#define CCTUNE_CONFIG_CATALOG_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "config/schema.h"

namespace cctune {

struct ComponentInfo {
  std::string name;  // the registered (canonical) name
  std::string kind;
  std::shared_ptr<const Schema> schema;
};

class ComponentCatalog {
 public:
  ComponentCatalog() = default;
  ComponentCatalog(const ComponentCatalog&) = delete;
  ComponentCatalog& operator=(const ComponentCatalog&) = delete;

  // The process-wide catalog (a function-local static: safe from any initialisation order).
  static ComponentCatalog& Global();

  // Adds `name`. Errors: empty kind, a name already taken (as a name or an alias), a name
  // starting "torchtune." (register the cctune spelling; the torchtune one then resolves), or
  // a malformed schema.
  absl::Status Add(std::string name, std::string kind, Schema schema);
  // Makes `alias` resolve to the registered `name`.
  absl::Status AddAlias(std::string alias, std::string name);

  // The entry `name` resolves to, or nullopt.
  std::optional<ComponentInfo> Find(absl::string_view name) const;
  // As Find, or NotFound: "unknown component 'x'", suggestions for near names and the
  // registered names of `kind` (all kinds when empty).
  absl::StatusOr<ComponentInfo> Lookup(absl::string_view name, absl::string_view kind = "") const;

  // Registered names (not aliases), sorted; only those of `kind` when it is not empty.
  std::vector<std::string> Names(absl::string_view kind = "") const;
  // The kinds that have at least one registered name, sorted.
  std::vector<std::string> Kinds() const;
  // The explicit aliases (AddAlias) of the registered `name`, sorted; the automatic
  // torchtune spelling is not among them.
  std::vector<std::string> AliasesOf(absl::string_view name) const;

 private:
  std::optional<ComponentInfo> FindLocked(absl::string_view name) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<std::string, ComponentInfo, std::less<>> entries_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string, std::less<>> aliases_ ABSL_GUARDED_BY(mu_);
};

// A readable listing of the registered components (`cctune ls --components`): for each kind
// (only `kind` when not empty) and name, its spellings, its doc and one line per key with its
// type, default (or "-"), whether it is required, and its doc. NotFound naming the registered
// kinds when `kind` has no components.
absl::StatusOr<std::string> DescribeComponents(const ComponentCatalog& catalog,
                                               absl::string_view kind = "");

// "torchtune.models.x" -> "cctune.models.x"; other names unchanged.
std::string TorchtuneToCctune(absl::string_view name);

// Levenshtein distance, for "did you mean" suggestions.
int EditDistance(absl::string_view a, absl::string_view b);

// Up to `max` of `candidates` close to `word` (by edit distance), closest first.
std::vector<std::string> NearMatches(absl::string_view word,
                                     const std::vector<std::string>& candidates, size_t max = 3);

}  // namespace cctune

#endif  // CCTUNE_CONFIG_CATALOG_H_
