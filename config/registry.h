// Registry<T, Args...>: `_component_` names -> factories that build a T from their config node
// (plus any extra arguments the recipe passes, as torchtune's instantiate(cfg.x, *args) does).
// Each registry serves one component kind ("model", "tokenizer", ...) and records every
// name's Schema in a ComponentCatalog, so Validate() can check configs without building.
//
// Instantiate(node) first checks the node against the schema (unknown keys, listing the
// accepted ones; wrong types; missing required keys; all with file:line and key), then calls
// the factory with the node plus the schema's defaults for absent keys.
//
// Registration: explicit functions, no static registrars. A package exposes
//
//   absl::Status RegisterLlama3_2Models() {  // idempotent, thread-safe
//     static const absl::Status status = [] {
//       CCTUNE_RETURN_IF_ERROR(ModelRegistry().Register(
//           "cctune.models.llama3_2.llama3_2_1b",
//           Schema().Default("max_seq_len", KeyType::Int(), ConfigNode::Int(131072), "..."),
//           [](const ConfigNode& node) -> absl::StatusOr<std::unique_ptr<Model>> { ... }));
//       return absl::OkStatus();
//     }();
//     return status;
//   }
//
// and a recipe calls the Register functions it needs at the top of main(). Nothing depends
// on static initialisation order and no library needs alwayslink = 1. Each kind registers from
// the folder that implements it: tokenizers/tokenizer_components.h (tokenizer),
// checkpoint/checkpointer_components.h (checkpointer), data/dataset_components.h (dataset),
// training/training_components.h (optimizer, lr_scheduler, loss),
// training/metric_logger_components.h (metric_logger), and the models' registration (model).
// `cctune ls --components` lists them all from the catalog (DescribeComponents). Registries themselves
// are function-local statics:
//
//   using ModelRegistryT = Registry<std::unique_ptr<Model>>;
//   ModelRegistryT& ModelRegistry() {
//     static ModelRegistryT* const r = new ModelRegistryT("model");
//     return *r;
//   }
//
// "torchtune.<rest>" names resolve to "cctune.<rest>"; AddAlias() covers other spellings.
#ifndef CCTUNE_CONFIG_REGISTRY_H_
#define CCTUNE_CONFIG_REGISTRY_H_

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "config/catalog.h"
#include "config/node.h"
#include "config/schema.h"
#include "config/validate.h"
#include "core/status.h"

namespace cctune {

template <typename T, typename... Args>
class Registry {
 public:
  using Factory = std::function<absl::StatusOr<T>(const ConfigNode& node, Args... args)>;

  // `kind` names the components in messages and in schemas (KeyType::Component(kind)).
  explicit Registry(std::string kind, ComponentCatalog* catalog = &ComponentCatalog::Global())
      : kind_(std::move(kind)), catalog_(catalog) {}
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  const std::string& kind() const { return kind_; }
  const ComponentCatalog& catalog() const { return *catalog_; }

  // Registers `name` (spelled "cctune.<...>"; "torchtune.<...>" then resolves to it).
  // AlreadyExists if taken; InvalidArgument for a malformed schema or an empty factory.
  absl::Status Register(std::string name, Schema schema, Factory factory) {
    if (!factory) {
      return absl::InvalidArgumentError(absl::StrCat("component '", name, "': empty factory"));
    }
    CCTUNE_RETURN_IF_ERROR(catalog_->Add(name, kind_, std::move(schema)));
    absl::MutexLock lock(&mu_);
    factories_[std::move(name)] = std::move(factory);
    return absl::OkStatus();
  }

  // Makes `alias` (e.g. a torchtune name whose path differs) resolve to `name` of this kind.
  absl::Status AddAlias(std::string alias, std::string name) {
    const std::optional<ComponentInfo> info = catalog_->Find(name);
    if (!info.has_value() || info->kind != kind_) {
      return absl::NotFoundError(absl::StrCat("alias '", alias, "': no ", kind_,
                                              " component '", name, "' is registered"));
    }
    return catalog_->AddAlias(std::move(alias), info->name);
  }

  // Whether `name` (or its alias / torchtune spelling) builds here.
  bool Contains(absl::string_view name) const {
    const std::optional<ComponentInfo> info = catalog_->Find(name);
    if (!info.has_value() || info->kind != kind_) return false;
    absl::MutexLock lock(&mu_);
    return factories_.count(info->name) != 0;
  }

  // Registered names of this kind, sorted.
  std::vector<std::string> Names() const { return catalog_->Names(kind_); }

  // Checks `node` (a map with `_component_`) and builds it. Factory errors come back with the
  // node's file:line, key and component name in front.
  absl::StatusOr<T> Instantiate(const ConfigNode& node, Args... args) const {
    std::vector<ConfigError> errors;
    CheckComponent(node, kind_, *catalog_, &errors);
    CCTUNE_RETURN_IF_ERROR(ErrorsToStatus(errors));
    const std::optional<ComponentInfo> info = catalog_->Find(node.ComponentName());
    CCTUNE_CHECK(info.has_value(), "component vanished after checking");
    Factory factory;
    {
      absl::MutexLock lock(&mu_);
      auto it = factories_.find(info->name);
      if (it == factories_.end()) {
        return node.Error(absl::StrCat(kind_, " component '", info->name,
                                       "' is known to the catalog but has no factory in this "
                                       "registry"));
      }
      factory = it->second;
    }
    absl::StatusOr<T> built =
        factory(WithDefaults(node, *info->schema), std::forward<Args>(args)...);
    if (!built.ok()) {
      return absl::Status(built.status().code(),
                          absl::StrCat(node.MakeError(absl::StrCat("building ", kind_, " '",
                                                                   info->name, "'"))
                                           .ToString(),
                                       ": ", built.status().message()));
    }
    return built;
  }

  // Instantiate(parent.<key>), e.g. InstantiateKey(config.root(), "model").
  absl::StatusOr<T> InstantiateKey(const ConfigNode& parent, absl::string_view key,
                                   Args... args) const {
    CCTUNE_ASSIGN_OR_RETURN(const ConfigNode* node, parent.Get(key));
    return Instantiate(*node, std::forward<Args>(args)...);
  }

 private:
  const std::string kind_;
  ComponentCatalog* const catalog_;
  mutable absl::Mutex mu_;
  std::map<std::string, Factory, std::less<>> factories_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cctune

#endif  // CCTUNE_CONFIG_REGISTRY_H_
