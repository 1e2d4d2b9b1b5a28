#include "config/interpolation.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cctune {
namespace {

// A string split into literal text and references (`ref` holds the key, leading dots kept).
struct Piece {
  bool is_ref = false;
  std::string text;
};

// Splits `s` into pieces, or returns a message saying what is malformed.
bool ParsePieces(absl::string_view s, std::vector<Piece>* pieces, std::string* error) {
  std::string literal;
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] == '\\' && s.substr(i + 1, 2) == "${") {
      literal += "${";
      i += 3;
    } else if (s.substr(i, 2) == "${") {
      const size_t close = s.find('}', i + 2);
      if (close == absl::string_view::npos) {
        *error = absl::StrCat("unterminated '${' in '", s, "'");
        return false;
      }
      absl::string_view inner = s.substr(i + 2, close - i - 2);
      if (inner.find("${") != absl::string_view::npos) {
        *error = absl::StrCat("nested interpolations are not supported: '", s, "'");
        return false;
      }
      inner = absl::StripAsciiWhitespace(inner);
      if (inner.empty()) {
        *error = absl::StrCat("empty interpolation '${}' in '", s, "'");
        return false;
      }
      if (inner.find(':') != absl::string_view::npos) {
        *error = absl::StrCat("resolver interpolations such as '${", inner,
                              "}' are not supported; only ${key} references are");
        return false;
      }
      if (!literal.empty()) pieces->push_back(Piece{false, std::move(literal)});
      literal.clear();
      pieces->push_back(Piece{true, std::string(inner)});
      i = close + 1;
    } else {
      literal.push_back(s[i]);
      ++i;
    }
  }
  if (!literal.empty()) pieces->push_back(Piece{false, std::move(literal)});
  return true;
}

std::string Ref(absl::string_view key) { return absl::StrCat("${", key, "}"); }

// Values at and below `node` (1 for a scalar), counting up to `limit`.
int64_t CountValues(const ConfigNode& node, int64_t limit) {
  int64_t n = 1;
  if (node.IsList()) {
    for (const ConfigNode& item : node.items()) {
      if (n > limit) break;
      n += CountValues(item, limit - n);
    }
  } else if (node.IsMap()) {
    for (const auto& e : node.entries()) {
      if (n > limit) break;
      n += CountValues(e.second, limit - n);
    }
  }
  return n;
}

// Containers above a node at `path` ("" = the root: none; "a" is inside the top-level map).
int Level(const std::string& path) {
  if (path.empty()) return 0;
  auto segments = SplitKey(path);
  return segments.ok() ? static_cast<int>(segments->size()) : 0;
}

class Resolver {
 public:
  explicit Resolver(ConfigNode* root) : root_(root) {}

  std::vector<ConfigError> Run(std::vector<std::string>* failed) {
    Collect(*root_);
    for (const std::string& path : order_) {
      if (state_[path] != State::kPending) continue;
      ConfigNode* node = path.empty() ? root_ : root_->FindMutable(path);
      if (node != nullptr) ResolveString(node);
    }
    if (failed != nullptr) {
      for (const std::string& path : order_) {
        if (state_[path] == State::kFailed) failed->push_back(path);
      }
    }
    return std::move(errors_);
  }

 private:
  enum class State { kPending, kResolving, kDone, kFailed };

  void Collect(const ConfigNode& node) {
    if (node.kind() == ConfigNode::Kind::kString && HasInterpolation(node.string_value())) {
      order_.push_back(node.path());
      state_[node.path()] = State::kPending;
    } else if (node.IsList()) {
      for (const ConfigNode& item : node.items()) Collect(item);
    } else if (node.IsMap()) {
      for (const auto& e : node.entries()) Collect(e.second);
    }
  }

  State StateOf(const std::string& path) const {
    auto it = state_.find(path);
    return it == state_.end() ? State::kDone : it->second;
  }

  // Makes sure `node` (a string, maybe pending) is resolved. `referrer` is the node whose
  // reference led here, for the cycle message. False when it failed (error already recorded).
  bool EnsureResolved(ConfigNode* node, const ConfigNode& referrer) {
    switch (StateOf(node->path())) {
      case State::kDone:
        return true;
      case State::kFailed:
        return false;
      case State::kPending:
        return ResolveString(node);
      case State::kResolving:
        ReportCycle(node->path(), referrer);
        return false;
    }
    return false;
  }

  // Resolves every pending string at or below `node`.
  bool EnsureSubtree(ConfigNode* node, const ConfigNode& referrer) {
    if (node->kind() == ConfigNode::Kind::kString) return EnsureResolved(node, referrer);
    if (!node->IsMap() && !node->IsList()) return true;
    // While its strings resolve, the container is "being resolved": a reference back into it
    // from inside is a cycle (a: {b: ${a}}).
    stack_.push_back(node->path());
    bool ok = true;
    if (node->IsList()) {
      for (ConfigNode& item : node->mutable_items()) ok = EnsureSubtree(&item, referrer) && ok;
    } else {
      for (auto& e : node->mutable_entries()) ok = EnsureSubtree(&e.second, referrer) && ok;
    }
    stack_.pop_back();
    return ok;
  }

  void ReportCycle(const std::string& path, const ConfigNode& referrer) {
    std::vector<std::string> chain;
    bool in_cycle = false;
    for (const std::string& p : stack_) {
      if (p == path) in_cycle = true;
      if (in_cycle) chain.push_back(Ref(p));
    }
    chain.push_back(Ref(path));
    errors_.push_back(
        referrer.MakeError(absl::StrCat("interpolation cycle: ", absl::StrJoin(chain, " -> "))));
  }

  bool OnStack(const std::string& path) const {
    for (const std::string& p : stack_) {
      if (p == path) return true;
    }
    return false;
  }

  // The node `ref` names, seen from `referrer`, fully resolved; nullptr on failure.
  ConfigNode* Lookup(const ConfigNode& referrer, const std::string& ref) {
    size_t dots = 0;
    while (dots < ref.size() && ref[dots] == '.') ++dots;
    std::vector<std::string> segments;
    if (dots > 0) {
      auto base = referrer.path().empty() ? absl::StatusOr<std::vector<std::string>>(
                                                std::vector<std::string>())
                                          : SplitKey(referrer.path());
      if (!base.ok() || dots > base->size()) {
        errors_.push_back(referrer.MakeError(absl::StrCat(
            "interpolation ", Ref(ref), " goes above the top of the config")));
        return nullptr;
      }
      segments.assign(base->begin(), base->end() - dots);
    }
    const std::string rest = ref.substr(dots);
    if (!rest.empty()) {
      auto more = SplitKey(rest);
      if (!more.ok()) {
        errors_.push_back(referrer.MakeError(absl::StrCat(
            "interpolation ", Ref(ref), ": ", more.status().message())));
        return nullptr;
      }
      segments.insert(segments.end(), more->begin(), more->end());
    }
    if (segments.empty()) {
      errors_.push_back(referrer.MakeError(
          absl::StrCat("interpolation ", Ref(ref), " refers to the whole config")));
      return nullptr;
    }
    const std::string absolute = absl::StrJoin(segments, ".");
    ConfigNode* node = root_;
    std::string walked;
    for (const std::string& seg : segments) {
      if (node->kind() == ConfigNode::Kind::kString && !EnsureResolved(node, referrer)) {
        return nullptr;
      }
      ConfigNode* next = nullptr;
      if (node->IsMap()) {
        next = node->MutableChild(seg);
      } else if (node->IsList()) {
        int64_t i = -1;
        if (absl::SimpleAtoi(seg, &i) && i >= 0 && static_cast<size_t>(i) < node->size()) {
          next = &node->mutable_items()[i];
        }
      }
      if (next == nullptr) {
        std::string detail;
        if (node->IsMap()) {
          detail = absl::StrCat(walked.empty() ? "the config" : absl::StrCat("'", walked, "'"),
                                " has keys: ", node->KeysForMessage());
        } else {
          detail = absl::StrCat("'", walked, "' is ", node->Describe());
        }
        errors_.push_back(referrer.MakeError(absl::StrCat("interpolation ", Ref(ref),
                                                          " refers to missing key '", absolute,
                                                          "' (", detail, ")")));
        return nullptr;
      }
      node = next;
      walked = node->path();
    }
    if (OnStack(node->path())) {
      // The referrer itself, or a container being resolved that holds it.
      ReportCycle(node->path(), referrer);
      return nullptr;
    }
    if (!EnsureSubtree(node, referrer)) return nullptr;
    return node;
  }

  bool ResolveString(ConfigNode* node) {
    const std::string path = node->path();
    std::vector<Piece> pieces;
    std::string parse_error;
    if (!ParsePieces(node->string_value(), &pieces, &parse_error)) {
      errors_.push_back(node->MakeError(parse_error));
      state_[path] = State::kFailed;
      return false;
    }
    if (resolving_ >= kMaxInterpolationDepth) {
      // Each string waits for the one it refers to: without a limit, a long chain of
      // references exhausts the stack.
      errors_.push_back(node->MakeError(absl::StrCat(
          "more than ", kMaxInterpolationDepth, " ${} references resolve one through another "
          "(the limit), from ", Ref(ChainStart()), " to ", Ref(path))));
      state_[path] = State::kFailed;
      return false;
    }
    ++resolving_;
    state_[path] = State::kResolving;
    stack_.push_back(path);
    auto fail = [&]() {
      stack_.pop_back();
      state_[path] = State::kFailed;
      --resolving_;
      return false;
    };
    if (pieces.size() == 1 && pieces[0].is_ref) {
      ConfigNode* target = Lookup(*node, pieces[0].text);
      if (target == nullptr) return fail();
      const int depth = Level(path) + target->Depth();
      if (depth > kMaxConfigDepth) {
        errors_.push_back(node->MakeError(absl::StrCat(
            "interpolation ", Ref(pieces[0].text), " puts ", target->Describe(), " at ",
            depth, " levels of lists and maps, more than the limit of ", kMaxConfigDepth)));
        return fail();
      }
      // Each whole-value reference is a copy: like YAML aliases, references to references can
      // multiply a small config into billions of values.
      copied_values_ += CountValues(*target, kMaxConfigValues - copied_values_);
      if (copied_values_ > kMaxConfigValues) {
        errors_.push_back(node->MakeError(absl::StrCat(
            "interpolation ", Ref(pieces[0].text), ": ${} references copy more than ",
            kMaxConfigValues, " values in all (the limit)")));
        return fail();
      }
      ConfigNode value = *target;
      value.set_location(node->location());
      *node = std::move(value);
      node->RefreshPaths(path);
    } else {
      std::string out;
      for (const Piece& piece : pieces) {
        if (!piece.is_ref) {
          out += piece.text;
          continue;
        }
        ConfigNode* target = Lookup(*node, piece.text);
        if (target == nullptr) return fail();
        if (!target->IsScalar() || target->IsNull()) {
          errors_.push_back(node->MakeError(
              absl::StrCat("interpolation ", Ref(piece.text), " inside a string refers to ",
                           target->Describe(), " at ", target->location().ToString(),
                           "; only strings, numbers and booleans can be embedded")));
          return fail();
        }
        out += target->kind() == ConfigNode::Kind::kString ? target->string_value()
                                                           : target->text();
        if (out.size() > kMaxInterpolatedStringBytes) {
          errors_.push_back(node->MakeError(absl::StrCat(
              "interpolation ", Ref(piece.text), " makes the string longer than ",
              kMaxInterpolatedStringBytes, " bytes (the limit)")));
          return fail();
        }
      }
      *node = ConfigNode::String(std::move(out), node->location());
      node->RefreshPaths(path);
    }
    stack_.pop_back();
    state_[path] = State::kDone;
    --resolving_;
    return true;
  }

  // The outermost string being resolved, for messages.
  std::string ChainStart() const {
    for (const std::string& p : stack_) {
      if (state_.count(p) != 0) return p;
    }
    return stack_.empty() ? std::string() : stack_.front();
  }

  ConfigNode* root_;
  std::vector<std::string> order_;
  std::map<std::string, State> state_;
  std::vector<std::string> stack_;  // paths being resolved, outermost first
  int resolving_ = 0;               // strings being resolved, each waiting on the next
  int64_t copied_values_ = 0;       // values copied by whole-value references so far
  std::vector<ConfigError> errors_;
};

}  // namespace

bool HasInterpolation(absl::string_view s) { return s.find("${") != absl::string_view::npos; }

std::vector<ConfigError> ResolveInterpolations(ConfigNode* root,
                                               std::vector<std::string>* failed) {
  root->RefreshPaths(root->path());
  return Resolver(root).Run(failed);
}

}  // namespace cctune
