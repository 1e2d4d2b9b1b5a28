#include "config/catalog.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cctune {
namespace {

constexpr absl::string_view kTorchtunePrefix = "torchtune.";
constexpr absl::string_view kCctunePrefix = "cctune.";
constexpr size_t kMaxListed = 30;  // names listed in an "unknown component" error

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

}  // namespace cctune
