#include "checkpoint/state_dict.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cctune {
namespace {

std::string ListSome(const std::vector<std::string>& names, size_t max_names = 8) {
  std::vector<std::string> shown;
  for (size_t i = 0; i < names.size() && i < max_names; ++i) {
    shown.push_back(absl::StrCat("'", names[i], "'"));
  }
  std::string out = absl::StrJoin(shown, ", ");
  if (names.size() > max_names) absl::StrAppend(&out, ", ... (", names.size(), " in all)");
  return out;
}

}  // namespace

absl::StatusOr<Tensor> GetTensor(const StateDict& sd, const std::string& name,
                                 const std::string& what) {
  auto it = sd.find(name);
  if (it == sd.end()) {
    return absl::NotFoundError(
        absl::StrCat(what, ": no tensor '", name, "' (it holds ", sd.size(), " tensors)"));
  }
  return it->second;
}

absl::Status CheckStateDictKeys(const StateDict& sd, const std::vector<std::string>& expected,
                                const std::string& what) {
  const std::set<std::string> want(expected.begin(), expected.end());
  std::vector<std::string> missing, unexpected;
  for (const std::string& name : want) {
    if (sd.count(name) == 0) missing.push_back(name);
  }
  for (const auto& [name, tensor] : sd) {
    if (want.count(name) == 0) unexpected.push_back(name);
  }
  if (missing.empty() && unexpected.empty()) return absl::OkStatus();
  std::string msg = absl::StrCat(what, ": state dict keys do not match");
  if (!missing.empty()) absl::StrAppend(&msg, "; missing ", ListSome(missing));
  if (!unexpected.empty()) absl::StrAppend(&msg, "; unexpected ", ListSome(unexpected));
  return absl::InvalidArgumentError(msg);
}

int64_t StateDictBytes(const StateDict& sd) {
  int64_t total = 0;
  for (const auto& [name, tensor] : sd) total += static_cast<int64_t>(tensor.nbytes());
  return total;
}

}  // namespace cctune
