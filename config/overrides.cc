#include "config/overrides.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "config/yaml_loader.h"
#include "core/status.h"

namespace cctune {
namespace {

constexpr char kForms[] =
    "overrides are key=value (set), ~key (delete) or component=name (e.g. "
    "model=cctune.models.llama3_2.llama3_2_1b)";

absl::Status SyntaxError(absl::string_view arg, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("bad command-line override '", arg, "': ", why, "; ", kForms));
}

absl::Status CheckKey(absl::string_view arg, absl::string_view key) {
  if (key.empty()) return SyntaxError(arg, "the key is empty");
  for (char c : key) {
    if (absl::ascii_isspace(static_cast<unsigned char>(c))) {
      return SyntaxError(arg, absl::StrCat("the key '", key, "' contains whitespace"));
    }
  }
  if (key.find("${") != absl::string_view::npos) {
    return SyntaxError(arg, "keys cannot contain interpolations");
  }
  auto segments = SplitKey(key);
  if (!segments.ok()) return SyntaxError(arg, segments.status().message());
  return absl::OkStatus();
}

absl::Status Fail(const Override& o, std::string message) {
  return absl::InvalidArgumentError(
      ConfigError{OverrideLocation(o), o.key, std::move(message)}.ToString());
}

// " (configs/x.yaml:3)" for a node with a location.
std::string At(const ConfigNode& node) {
  return node.location().source.empty() ? "" : absl::StrCat(" (", node.location().ToString(), ")");
}

// OmegaConf merge: maps merge key by key, anything else replaces.
void Merge(ConfigNode* dst, ConfigNode src) {
  if (!dst->IsMap() || !src.IsMap()) {
    *dst = std::move(src);
    return;
  }
  for (auto& e : src.mutable_entries()) {
    ConfigNode* existing = dst->MutableChild(e.first);
    if (existing != nullptr && existing->IsMap() && e.second.IsMap()) {
      Merge(existing, std::move(e.second));
    } else {
      dst->Set(e.first, std::move(e.second));
    }
  }
}

// Index of `seg` in `list`, or an error naming the override.
absl::StatusOr<size_t> ListIndex(const Override& o, const ConfigNode& list,
                                 const std::string& seg) {
  int64_t i = -1;
  if (!absl::SimpleAtoi(seg, &i) || i < 0 || static_cast<size_t>(i) >= list.size()) {
    return Fail(o, absl::StrCat("'", list.path(), "' is ", list.Describe(), At(list),
                                "; '", seg, "' is not an index in it"));
  }
  return static_cast<size_t>(i);
}

// ApplyOverride without refreshing paths first: `root`'s paths must be right. Only the
// subtree an override changes gets new paths, so n overrides cost O(n), not O(n * size).
absl::Status ApplyOne(const Override& o, ConfigNode* root) {
  CCTUNE_CHECK(root->IsMap(), "override target must be a map");
  CCTUNE_ASSIGN_OR_RETURN(std::vector<std::string> segments, SplitKey(o.key));
  const Location loc = OverrideLocation(o);
  if (segments.size() > static_cast<size_t>(kMaxConfigDepth)) {
    return Fail(o, absl::StrCat("the key has ", segments.size(), " parts, more than the limit of ",
                                kMaxConfigDepth, " levels of nesting"));
  }

  // Walk to the parent of the last segment; a set creates missing maps on the way.
  ConfigNode* node = root;
  for (size_t i = 0; i + 1 < segments.size(); ++i) {
    const std::string& seg = segments[i];
    ConfigNode* next = nullptr;
    if (node->IsMap()) {
      next = node->MutableChild(seg);
      if (next == nullptr) {
        if (o.op == Override::Op::kDelete) {
          return Fail(o, absl::StrCat("cannot delete: no key '", JoinKey(node->path(), seg),
                                      "' in the config"));
        }
        next = &node->Set(seg, ConfigNode::Map({}, loc));
      } else if (next->IsNull() && o.op == Override::Op::kSet) {
        *next = ConfigNode::Map({}, loc);
        next->RefreshPaths(JoinKey(node->path(), seg));
      }
    } else if (node->IsList()) {
      CCTUNE_ASSIGN_OR_RETURN(size_t index, ListIndex(o, *node, seg));
      next = &node->mutable_items()[index];
    } else {
      return Fail(o, absl::StrCat("'", node->path(), "' is ", node->Describe(), At(*node),
                                  ", not a map, so it has no key '", seg, "'"));
    }
    node = next;
  }
  const std::string& last = segments.back();

  if (o.op == Override::Op::kDelete) {
    if (node->IsMap()) {
      if (!node->Erase(last)) {
        return Fail(o, absl::StrCat("cannot delete: no key '", o.key, "' in the config",
                                    node->path().empty()
                                        ? ""
                                        : absl::StrCat(" ('", node->path(),
                                                       "' has keys: ", node->KeysForMessage(),
                                                       ")")));
      }
    } else if (node->IsList()) {
      CCTUNE_ASSIGN_OR_RETURN(size_t index, ListIndex(o, *node, last));
      node->mutable_items().erase(node->mutable_items().begin() + index);
      node->RefreshPaths(node->path());  // later items moved up
    } else {
      return Fail(o, absl::StrCat("cannot delete: '", node->path(), "' is ", node->Describe(),
                                  At(*node), ", not a map"));
    }
    return absl::OkStatus();
  }

  auto value = ParseOverrideValue(o.value_text, loc);
  if (!value.ok()) {
    return Fail(o, absl::StrCat("cannot parse the value '", o.value_text,
                                "': ", value.status().message()));
  }
  const int depth = static_cast<int>(segments.size()) + value->Depth();
  if (depth > kMaxConfigDepth) {
    return Fail(o, absl::StrCat("the value would sit at ", depth,
                                " levels of lists and maps, more than the limit of ",
                                kMaxConfigDepth));
  }
  ConfigNode* target = nullptr;
  if (node->IsMap()) {
    target = node->MutableChild(last);
    if (target == nullptr) {
      node->Set(last, *std::move(value));
      return absl::OkStatus();
    }
  } else if (node->IsList()) {
    CCTUNE_ASSIGN_OR_RETURN(size_t index, ListIndex(o, *node, last));
    target = &node->mutable_items()[index];
  } else {
    return Fail(o, absl::StrCat("'", node->path(), "' is ", node->Describe(), At(*node),
                                ", not a map, so it has no key '", last, "'"));
  }

  const std::string target_path = target->path();
  if (target->IsComponent()) {
    // torchtune's shorthand: `model=name` swaps the component and keeps its other keys.
    switch (value->kind()) {
      case ConfigNode::Kind::kString:
        target->Set("_component_", *std::move(value));
        break;
      case ConfigNode::Kind::kNull:
      case ConfigNode::Kind::kMap:
        Merge(target, *std::move(value));
        break;
      default:
        return Fail(o, absl::StrCat("'", o.key, "'", At(*target), " is the component '",
                                    target->ComponentName(), "'; set it to a component name, "
                                    "null or a map, not ", value->Describe()));
    }
  } else {
    Merge(target, *std::move(value));
  }
  target->RefreshPaths(target_path);
  return absl::OkStatus();
}

}  // namespace

Location OverrideLocation(const Override& o) {
  return Location{absl::StrCat("command-line override '", o.text, "'"), 0, 0};
}

absl::StatusOr<Override> ParseOverride(absl::string_view arg) {
  Override o;
  o.text = std::string(arg);
  if (arg.empty()) return SyntaxError(arg, "empty argument");
  if (arg[0] == '-') {
    return SyntaxError(arg, "it looks like a flag; flags go before the overrides");
  }
  if (arg[0] == '~') {
    o.op = Override::Op::kDelete;
    o.key = std::string(arg.substr(1));
    if (o.key.find('=') != std::string::npos) {
      return SyntaxError(arg, "'~key' deletes a key and takes no value");
    }
    CCTUNE_RETURN_IF_ERROR(CheckKey(arg, o.key));
    if (o.key.find("_component_") != std::string::npos) {
      return SyntaxError(arg, absl::StrCat("a component's _component_ cannot be deleted on its "
                                           "own; delete the whole node instead"));
    }
    return o;
  }
  const size_t eq = arg.find('=');
  if (eq == absl::string_view::npos) return SyntaxError(arg, "no '=' in it");
  o.op = Override::Op::kSet;
  o.key = std::string(arg.substr(0, eq));
  o.value_text = std::string(arg.substr(eq + 1));
  CCTUNE_RETURN_IF_ERROR(CheckKey(arg, o.key));
  return o;
}

absl::StatusOr<ConfigNode> ParseOverrideValue(absl::string_view value, const Location& loc) {
  if (value.empty()) return ConfigNode::Null(loc);  // torchtune: `key=` means null
  const char c = value[0];
  if (c == '[' || c == '{' || c == '"' || c == '\'' || absl::StartsWith(value, "!!")) {
    return ParseYamlValue(value, loc);
  }
  return ResolvePlainScalar(value, loc);
}

absl::Status ApplyOverride(const Override& o, ConfigNode* root) {
  root->RefreshPaths("");
  return ApplyOne(o, root);
}

absl::Status ApplyOverrides(const std::vector<std::string>& args, ConfigNode* root) {
  std::vector<std::string> problems;
  root->RefreshPaths("");
  for (const std::string& arg : args) {
    absl::Status s;
    auto parsed = ParseOverride(arg);
    if (!parsed.ok()) {
      s = parsed.status();
    } else {
      s = ApplyOne(*parsed, root);
    }
    if (!s.ok()) problems.emplace_back(s.message());
  }
  if (problems.empty()) return absl::OkStatus();
  if (problems.size() == 1) return absl::InvalidArgumentError(problems[0]);
  return absl::InvalidArgumentError(absl::StrCat(problems.size(), " bad overrides:\n  ",
                                                 absl::StrJoin(problems, "\n  ")));
}

}  // namespace cctune
