#include "config/catalog.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace cctune {
namespace {

constexpr absl::string_view kTorchtunePrefix = "torchtune.";
constexpr absl::string_view kCctunePrefix = "cctune.";
constexpr size_t kMaxListed = 30;  // names listed in an "unknown component" error

// A default value on one line: scalars as YAML writes them, lists and maps in flow style.
std::string FlowValue(const ConfigNode& node) {
  if (node.IsList()) {
    std::vector<std::string> items;
    for (const ConfigNode& item : node.items()) items.push_back(FlowValue(item));
    return absl::StrCat("[", absl::StrJoin(items, ", "), "]");
  }
  if (node.IsMap()) {
    std::vector<std::string> entries;
    for (const auto& [key, value] : node.entries()) {
      entries.push_back(absl::StrCat(key, ": ", FlowValue(value)));
    }
    return absl::StrCat("{", absl::StrJoin(entries, ", "), "}");
  }
  return std::string(absl::StripSuffix(node.ToYaml(), "\n"));
}

std::string Pad(absl::string_view s, size_t width) {
  std::string out(s);
  if (out.size() < width) out.append(width - out.size(), ' ');
  return out;
}

}  // namespace

std::string TorchtuneToCctune(absl::string_view name) {
  if (!absl::StartsWith(name, kTorchtunePrefix)) return std::string(name);
  return absl::StrCat(kCctunePrefix, name.substr(kTorchtunePrefix.size()));
}

int EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<int> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      const int substitute = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, substitute});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::vector<std::string> NearMatches(absl::string_view word,
                                     const std::vector<std::string>& candidates, size_t max) {
  const int limit = std::max<int>(2, static_cast<int>(word.size()) / 3);
  std::vector<std::pair<int, std::string>> scored;
  for (const std::string& c : candidates) {
    const int d = EditDistance(word, c);
    if (d <= limit) scored.emplace_back(d, c);
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<std::string> out;
  for (size_t i = 0; i < scored.size() && i < max; ++i) out.push_back(scored[i].second);
  return out;
}

ComponentCatalog& ComponentCatalog::Global() {
  static ComponentCatalog* const catalog = new ComponentCatalog();
  return *catalog;
}

absl::Status ComponentCatalog::Add(std::string name, std::string kind, Schema schema) {
  if (name.empty() || kind.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("component registration needs a name and a kind (got name '", name,
                     "', kind '", kind, "')"));
  }
  if (absl::StartsWith(name, kTorchtunePrefix)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "register '", name, "' as '", TorchtuneToCctune(name),
        "'; the torchtune spelling resolves to it automatically"));
  }
  if (schema.name().empty()) schema.set_name(name);
  absl::Status def = schema.CheckDefinition();
  if (!def.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("component '", name, "': ", def.message()));
  }
  absl::MutexLock lock(&mu_);
  if (entries_.count(name) != 0 || aliases_.count(name) != 0) {
    return absl::AlreadyExistsError(absl::StrCat(
        "component '", name, "' is already registered (",
        entries_.count(name) != 0 ? entries_.find(name)->second.kind : "alias", ")"));
  }
  ComponentInfo info{name, std::move(kind), std::make_shared<const Schema>(std::move(schema))};
  entries_.emplace(std::move(name), std::move(info));
  return absl::OkStatus();
}

absl::Status ComponentCatalog::AddAlias(std::string alias, std::string name) {
  absl::MutexLock lock(&mu_);
  if (entries_.count(name) == 0) {
    return absl::NotFoundError(absl::StrCat("alias '", alias, "' names '", name,
                                            "', which is not registered"));
  }
  if (entries_.count(alias) != 0 || aliases_.count(alias) != 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("alias '", alias, "' is already a registered name or alias"));
  }
  aliases_.emplace(std::move(alias), std::move(name));
  return absl::OkStatus();
}

std::optional<ComponentInfo> ComponentCatalog::FindLocked(absl::string_view name) const {
  for (const std::string& candidate : {std::string(name), TorchtuneToCctune(name)}) {
    auto it = entries_.find(candidate);
    if (it != entries_.end()) return it->second;
    auto alias = aliases_.find(candidate);
    if (alias != aliases_.end()) return entries_.find(alias->second)->second;
  }
  return std::nullopt;
}

std::vector<std::string> ComponentCatalog::Kinds() const {
  absl::ReaderMutexLock lock(&mu_);
  std::set<std::string> kinds;
  for (const auto& e : entries_) kinds.insert(e.second.kind);
  return std::vector<std::string>(kinds.begin(), kinds.end());
}

std::vector<std::string> ComponentCatalog::AliasesOf(absl::string_view name) const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const auto& a : aliases_) {
    if (a.second == name) out.push_back(a.first);  // aliases_ is sorted
  }
  return out;
}

std::optional<ComponentInfo> ComponentCatalog::Find(absl::string_view name) const {
  absl::ReaderMutexLock lock(&mu_);
  return FindLocked(name);
}

absl::StatusOr<ComponentInfo> ComponentCatalog::Lookup(absl::string_view name,
                                                       absl::string_view kind) const {
  if (auto found = Find(name)) return *found;
  // Suggest names (and aliases) of the wanted kind only.
  std::vector<std::string> all;
  {
    absl::ReaderMutexLock lock(&mu_);
    for (const auto& e : entries_) {
      if (kind.empty() || e.second.kind == kind) all.push_back(e.first);
    }
    for (const auto& a : aliases_) {
      if (kind.empty() || entries_.find(a.second)->second.kind == kind) all.push_back(a.first);
    }
  }
  std::string msg = absl::StrCat("unknown component '", name, "'");
  std::vector<std::string> near = NearMatches(TorchtuneToCctune(name), all);
  if (!near.empty()) absl::StrAppend(&msg, "; did you mean '", absl::StrJoin(near, "', '"), "'?");
  const std::vector<std::string> names = Names(kind);
  const std::string what = kind.empty() ? "components" : absl::StrCat(kind, " components");
  if (names.empty()) {
    absl::StrAppend(&msg, "; no ", what, " are registered (was the package's Register function "
                          "called?)");
  } else if (names.size() <= kMaxListed) {
    absl::StrAppend(&msg, "; registered ", what, ": ", absl::StrJoin(names, ", "));
  } else {
    absl::StrAppend(&msg, "; ", names.size(), " ", what, " are registered");
  }
  return absl::NotFoundError(msg);
}

std::vector<std::string> ComponentCatalog::Names(absl::string_view kind) const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<std::string> names;
  for (const auto& e : entries_) {
    if (kind.empty() || e.second.kind == kind) names.push_back(e.first);
  }
  return names;  // std::map keeps them sorted
}

absl::StatusOr<std::string> DescribeComponents(const ComponentCatalog& catalog,
                                               absl::string_view kind) {
  const std::vector<std::string> kinds = catalog.Kinds();
  if (!kind.empty() && std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) {
    return absl::NotFoundError(absl::StrCat("no components of kind '", kind,
                                            "' are registered; kinds: ",
                                            absl::StrJoin(kinds, ", ")));
  }
  std::string out;
  for (const std::string& k : kinds) {
    if (!kind.empty() && k != kind) continue;
    for (const std::string& name : catalog.Names(k)) {
      const std::optional<ComponentInfo> info = catalog.Find(name);
      if (!info.has_value()) continue;
      const Schema& schema = *info->schema;
      absl::StrAppend(&out, k, "  ", name, "\n");
      std::vector<std::string> spellings;
      if (absl::StartsWith(name, kCctunePrefix)) {
        spellings.push_back(absl::StrCat(kTorchtunePrefix, name.substr(kCctunePrefix.size())));
      }
      for (std::string& a : catalog.AliasesOf(name)) spellings.push_back(std::move(a));
      absl::StrAppend(&out, "    also: ", absl::StrJoin(spellings, ", "), "\n");
      if (!schema.doc().empty()) absl::StrAppend(&out, "    ", schema.doc(), "\n");
      if (schema.keys().empty()) {
        absl::StrAppend(&out, "    (no keys)\n\n");
        continue;
      }
      struct Row {
        std::string key, type, def, required, doc;
      };
      std::vector<Row> rows = {{"KEY", "TYPE", "DEFAULT", "REQUIRED", "DOC"}};
      for (const KeySpec& spec : schema.keys()) {
        rows.push_back({spec.name, spec.type.Name(),
                        spec.default_value.has_value() ? FlowValue(*spec.default_value) : "-",
                        spec.required ? "yes" : "no", spec.doc});
      }
      size_t w_key = 0, w_type = 0, w_def = 0;
      for (const Row& r : rows) {
        w_key = std::max(w_key, r.key.size());
        w_type = std::max(w_type, r.type.size());
        w_def = std::max(w_def, r.def.size());
      }
      for (const Row& r : rows) {
        absl::StrAppend(&out, "    ", Pad(r.key, w_key + 2), Pad(r.type, w_type + 2),
                        Pad(r.def, w_def + 2), Pad(r.required, 10), r.doc, "\n");
      }
      if (schema.allow_unknown_keys()) absl::StrAppend(&out, "    (other keys are accepted)\n");
      absl::StrAppend(&out, "\n");
    }
  }
  return out;
}

}  // namespace cctune
