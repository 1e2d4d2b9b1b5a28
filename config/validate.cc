#include "config/validate.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "config/interpolation.h"

namespace cctune {
namespace {

// What a validation pass carries around.
struct Checker {
  const ComponentCatalog& catalog;
  std::vector<ConfigError>* errors;
  const std::set<std::string>* skip;  // keys whose ${} failed: already reported

  bool Skipped(const ConfigNode& node) const {
    return skip != nullptr && skip->count(node.path()) != 0;
  }

  void Report(const ConfigNode& node, std::string message) const {
    errors->push_back(node.MakeError(std::move(message)));
  }

  // Checks nested component nodes inside values whose own type is free-form.
  void ScanForComponents(const ConfigNode& node) const {
    if (Skipped(node)) return;
    if (node.IsComponent()) {
      Component(node, "");
    } else if (node.IsMap()) {
      for (const auto& e : node.entries()) ScanForComponents(e.second);
    } else if (node.IsList()) {
      for (const ConfigNode& item : node.items()) ScanForComponents(item);
    }
  }

  void Value(const ConfigNode& node, const KeyType& type,
             const std::vector<std::function<absl::Status(const ConfigNode&)>>* checks) const {
    if (Skipped(node)) return;
    const std::string mismatch = type.Mismatch(node);
    if (!mismatch.empty()) {
      Report(node, mismatch);
      return;
    }
    if (!node.IsNull()) {
      switch (type.base()) {
        case KeyType::Base::kList:
          for (const ConfigNode& item : node.items()) Value(item, type.element(), nullptr);
          break;
        case KeyType::Base::kObject:
          Object(node, type.object(), false);
          break;
        case KeyType::Base::kComponent:
          Component(node, type.component_kind());
          break;
        case KeyType::Base::kAny:
        case KeyType::Base::kMap:
          ScanForComponents(node);
          break;
        default:
          break;
      }
    }
    if (checks == nullptr) return;
    for (const auto& check : *checks) {
      const absl::Status s = check(node);
      if (!s.ok()) Report(node, std::string(s.message()));
    }
  }

  void Object(const ConfigNode& node, const Schema& schema, bool is_component) const {
    for (const auto& [key, value] : node.entries()) {
      if (is_component && key == "_component_") continue;
      const KeySpec* spec = schema.Find(key);
      if (spec != nullptr) {
        Value(value, spec->type, &spec->checks);
        continue;
      }
      if (schema.allow_unknown_keys()) {
        ScanForComponents(value);
        continue;
      }
      std::string msg = absl::StrCat("unknown key '", key, "'");
      std::vector<std::string> accepted = schema.KeyNames();
      const std::vector<std::string> near = NearMatches(key, accepted);
      if (!near.empty()) absl::StrAppend(&msg, "; did you mean '", near[0], "'?");
      const std::string owner = schema.name().empty() ? "here" : absl::StrCat("by ", schema.name());
      if (accepted.empty()) {
        absl::StrAppend(&msg, "; no keys are accepted ", owner);
      } else {
        absl::StrAppend(&msg, "; keys accepted ", owner, ": ", absl::StrJoin(accepted, ", "));
      }
      Report(value, msg);
    }
    for (const KeySpec& spec : schema.keys()) {
      if (spec.required && node.Child(spec.name) == nullptr) {
        errors->push_back(ConfigError{
            node.location(), JoinKey(node.path(), spec.name),
            absl::StrCat("missing required key (", spec.type.Name(),
                         spec.doc.empty() ? "" : absl::StrCat(": ", spec.doc), ")",
                         schema.name().empty() ? "" : absl::StrCat(" of ", schema.name()))});
      }
    }
  }

  void Component(const ConfigNode& node, absl::string_view kind) const {
    const std::string what = kind.empty() ? "component" : absl::StrCat(kind, " component");
    if (!node.IsMap()) {
      Report(node, absl::StrCat("expected a ", what, " (a map with a _component_ key), got ",
                                node.Describe()));
      return;
    }
    const ConfigNode* name = node.Child("_component_");
    if (name == nullptr) {
      Report(node, absl::StrCat("missing _component_: the name of the ", what, " to build"));
      return;
    }
    if (Skipped(*name)) return;
    if (name->kind() != ConfigNode::Kind::kString) {
      Report(*name, absl::StrCat("expected a component name, got ", name->Describe()));
      return;
    }
    auto info = catalog.Lookup(name->string_value(), kind);
    if (!info.ok()) {
      Report(*name, std::string(info.status().message()));
      return;
    }
    if (!kind.empty() && info->kind != kind) {
      Report(*name, absl::StrCat("'", name->string_value(), "' is a ", info->kind,
                                 " component, but a ", kind, " component is expected here"));
      return;
    }
    Object(node, *info->schema, true);
  }
};

}  // namespace

void CheckAgainstSchema(const ConfigNode& node, const Schema& schema,
                        const ComponentCatalog& catalog, std::vector<ConfigError>* errors,
                        bool is_component) {
  Checker checker{catalog, errors, nullptr};
  if (!node.IsMap()) {
    checker.Report(node, absl::StrCat("expected a map, got ", node.Describe()));
    return;
  }
  checker.Object(node, schema, is_component);
}

void CheckComponent(const ConfigNode& node, absl::string_view kind,
                    const ComponentCatalog& catalog, std::vector<ConfigError>* errors) {
  Checker{catalog, errors, nullptr}.Component(node, kind);
}

ConfigNode WithDefaults(const ConfigNode& node, const Schema& schema) {
  ConfigNode out = node;
  if (!out.IsMap()) return out;
  for (const KeySpec& spec : schema.keys()) {
    ConfigNode* present = out.MutableChild(spec.name);
    if (present == nullptr) {
      if (!spec.default_value.has_value()) continue;
      ConfigNode value = *spec.default_value;
      value.set_location(Location{absl::StrCat("default of '", spec.name, "' in ",
                                               schema.name().empty() ? "its schema"
                                                                     : schema.name()),
                                  0, 0});
      out.Set(spec.name, std::move(value));
    } else if (spec.type.base() == KeyType::Base::kObject && present->IsMap()) {
      *present = WithDefaults(*present, spec.type.object());
    }
  }
  out.RefreshPaths(node.path());
  return out;
}

std::vector<ConfigError> Validate(const Config& config, const Schema& recipe_schema,
                                  const ComponentCatalog& catalog) {
  std::vector<ConfigError> errors;
  std::set<std::string> skip;
  ConfigNode resolved;
  const ConfigNode* root = &config.root();
  if (!config.resolved()) {
    resolved = config.unresolved();
    std::vector<std::string> failed;
    errors = ResolveInterpolations(&resolved, &failed);
    skip.insert(failed.begin(), failed.end());
    root = &resolved;
  }
  Checker checker{catalog, &errors, &skip};
  checker.Object(*root, recipe_schema, false);
  std::stable_sort(errors.begin(), errors.end(), [](const ConfigError& a, const ConfigError& b) {
    if (a.location.source != b.location.source) return a.location.source < b.location.source;
    return a.location.line < b.location.line;
  });
  return errors;
}

}  // namespace cctune
