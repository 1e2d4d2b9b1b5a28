// The config tree: a typed YAML value (null, bool, int, float, string, list, map) that
// remembers where it came from (file and line, or the command-line override that set it) and
// its dotted key path, so that every error can read
//   configs/foo.yaml:12: key 'model.num_layers': expected int, got string 'abc'
// Typed accessors (GetInt, GetString, GetList<T>, GetOptional<T>, ...) take dotted keys relative
// to the node they are called on; component factories read their own keys this way.
#ifndef CCTUNE_CONFIG_NODE_H_
#define CCTUNE_CONFIG_NODE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cctune {

// Limits on what a config may hold, so that hostile input fails with an error instead of
// exhausting the stack or memory (docs/config_reference.md, "Limits").
// Nesting of lists and maps, counted from the top-level map (depth 1); also the most segments
// an override key may have.
inline constexpr int kMaxConfigDepth = 100;
// Values a YAML text may expand to once aliases (*name) are copied in (billion laughs).
inline constexpr int64_t kMaxConfigValues = 1000000;
// The longest chain of ${} references resolved one through another.
inline constexpr int kMaxInterpolationDepth = 100;
// The longest string that embedded ${} references may build ("${a}${a}" doubles per level).
inline constexpr size_t kMaxInterpolatedStringBytes = size_t{1} << 20;

// Where a value was written. `source` is a file path, "<string>" for in-memory YAML, or a
// description such as "command-line override 'a.b=1'". line/column are 1-based; 0 = unknown.
struct Location {
  std::string source;
  int line = 0;
  int column = 0;

  // "configs/foo.yaml:12", "configs/foo.yaml" or "<unknown>".
  std::string ToString() const;
  // As ToString(), with ":column" when known (for YAML syntax errors).
  std::string ToStringWithColumn() const;
};

// One problem found in a config: where, which key (dotted path, may be empty for the whole
// config) and what is wrong.
struct ConfigError {
  Location location;
  std::string key;
  std::string message;

  // "configs/foo.yaml:12: key 'model.num_layers': expected int, got string 'abc'".
  std::string ToString() const;
};

// InvalidArgument listing every error on its own line (OK when `errors` is empty).
absl::Status ErrorsToStatus(const std::vector<ConfigError>& errors);

class ConfigNode {
 public:
  enum class Kind { kNull, kBool, kInt, kFloat, kString, kList, kMap };
  using Entry = std::pair<std::string, ConfigNode>;

  ConfigNode() = default;  // null

  static ConfigNode Null(Location loc = {});
  static ConfigNode Bool(bool v, Location loc = {});
  static ConfigNode Int(int64_t v, Location loc = {});
  static ConfigNode Float(double v, Location loc = {});
  static ConfigNode String(std::string v, Location loc = {});
  static ConfigNode List(std::vector<ConfigNode> items = {}, Location loc = {});
  static ConfigNode Map(std::vector<Entry> entries = {}, Location loc = {});
  // A scalar with its source spelling kept for printing (e.g. "2e-5" stays "2e-5").
  static ConfigNode Scalar(Kind kind, std::string text, Location loc);

  Kind kind() const { return kind_; }
  bool IsNull() const { return kind_ == Kind::kNull; }
  bool IsScalar() const { return kind_ != Kind::kList && kind_ != Kind::kMap; }
  bool IsList() const { return kind_ == Kind::kList; }
  bool IsMap() const { return kind_ == Kind::kMap; }
  // A map with a `_component_` key.
  bool IsComponent() const;
  // The `_component_` string of a component node ("" when absent or not a string).
  std::string ComponentName() const;

  const Location& location() const { return location_; }
  void set_location(Location loc) { location_ = std::move(loc); }
  // Dotted path from the config root: "model.num_layers", "checkpointer.files[1]"; "" = root.
  const std::string& path() const { return path_; }
  // Sets this node's path and recomputes its descendants'. Config does it after each change.
  void RefreshPaths(std::string path);

  // Scalar values; CHECK-fail on the wrong kind (use the Get* accessors for user input).
  bool bool_value() const;
  int64_t int_value() const;
  double float_value() const;  // also accepts kInt
  const std::string& string_value() const;
  // Source spelling of a scalar ("" for null), or the canonical spelling when built in code.
  const std::string& text() const { return text_; }

  // Lists.
  size_t size() const;  // number of items (list) or entries (map); 0 for scalars
  // Levels of lists and maps at and below this node (0 for a scalar). Loaded and resolved
  // trees are at most kMaxConfigDepth deep, so the recursion is bounded.
  int Depth() const;
  const std::vector<ConfigNode>& items() const;
  std::vector<ConfigNode>& mutable_items();

  // Maps, in source order.
  const std::vector<Entry>& entries() const;
  std::vector<Entry>& mutable_entries();
  std::vector<std::string> Keys() const;
  // The keys for an error message: "a, b, c", or the first `max` and "... (N more)".
  std::string KeysForMessage(size_t max = 30) const;
  const ConfigNode* Child(absl::string_view key) const;  // direct child or nullptr
  ConfigNode* MutableChild(absl::string_view key);
  // Replaces the value of `key` (keeping its place) or appends it. Returns the stored node.
  ConfigNode& Set(std::string key, ConfigNode value);
  bool Erase(absl::string_view key);

  // Lookups in maps of any size take O(1) on average: maps of kIndexedMapSize entries or more
  // keep a key index. Hold no reference from mutable_entries() across Set() or Erase().
  static constexpr size_t kIndexedMapSize = 16;

  // Dotted lookup relative to this node: "a.b", "a.list[2]" or "a.list.2". nullptr if absent
  // (a null value is present).
  const ConfigNode* Find(absl::string_view key) const;
  ConfigNode* FindMutable(absl::string_view key);
  // As Find, or NotFound naming the key, the deepest existing node and its location.
  absl::StatusOr<const ConfigNode*> Get(absl::string_view key) const;

  // Typed accessors. Supported T: std::string, bool, int, int64_t, float, double (ints widen
  // to floats, never the reverse), std::vector<T> of those, and const ConfigNode*.
  // Errors name file:line, key, the expected type and the actual value.
  template <typename T>
  absl::StatusOr<T> GetAs(absl::string_view key) const;
  // Absent or null -> std::nullopt; present with the wrong type -> error.
  template <typename T>
  absl::StatusOr<std::optional<T>> GetOptional(absl::string_view key) const;
  // Absent or null -> `fallback`; present with the wrong type -> error.
  template <typename T>
  absl::StatusOr<T> GetOr(absl::string_view key, T fallback) const;
  // This node itself as T.
  template <typename T>
  absl::StatusOr<T> As() const;

  absl::StatusOr<std::string> GetString(absl::string_view key) const;
  absl::StatusOr<int64_t> GetInt(absl::string_view key) const;
  absl::StatusOr<double> GetFloat(absl::string_view key) const;
  absl::StatusOr<bool> GetBool(absl::string_view key) const;
  template <typename T>
  absl::StatusOr<std::vector<T>> GetList(absl::string_view key) const {
    return GetAs<std::vector<T>>(key);
  }
  absl::StatusOr<std::optional<std::string>> GetOptionalString(absl::string_view key) const;
  absl::StatusOr<std::optional<int64_t>> GetOptionalInt(absl::string_view key) const;
  absl::StatusOr<std::optional<double>> GetOptionalFloat(absl::string_view key) const;
  absl::StatusOr<std::optional<bool>> GetOptionalBool(absl::string_view key) const;

  // "int", "string", "list", ...
  static const char* KindName(Kind kind);
  // The kind and value for messages: "string 'abc'", "int 5", "null", "list of 3 items",
  // "map with keys {a, b}".
  std::string Describe() const;
  // The error "<loc>: key '<path>': <message>" for this node.
  absl::Status Error(absl::string_view message) const;
  ConfigError MakeError(std::string message) const;

  // Block-style YAML that loads back to the same tree (comments and anchors are not kept).
  std::string ToYaml() const;

  // Structural equality of values (locations and paths are ignored; 1 != 1.0).
  bool operator==(const ConfigNode& other) const;
  bool operator!=(const ConfigNode& other) const { return !(*this == other); }

 private:
  void AppendYaml(int indent, std::string* out) const;
  // Makes index_ describe entries_ (maps of kIndexedMapSize entries or more).
  void RebuildIndex();
  // The index of `key` in entries_, or -1; `index_valid_` must hold or the map be small.
  int64_t FindEntry(absl::string_view key) const;

  Kind kind_ = Kind::kNull;
  bool bool_ = false;
  int64_t int_ = 0;
  double float_ = 0;
  std::string text_;  // scalar spelling; the value itself for kString
  std::vector<ConfigNode> items_;
  std::vector<Entry> entries_;
  // Key -> position in entries_ (the first of equal keys), valid when index_valid_.
  absl::flat_hash_map<std::string, size_t> index_;
  bool index_valid_ = false;
  Location location_;
  std::string path_;
};

// Types an unquoted YAML scalar the way torchtune's loader (OmegaConf on PyYAML, YAML 1.1)
// does: ~/null/Null/NULL/"" -> null; true/false/yes/no/on/off (3 casings) -> bool; decimal,
// 0x hex, 0b binary and 0-prefixed octal with optional '_' -> int; 1.5, 1., .5, 1e-5, 2.5E+3,
// .inf, -.inf, .nan -> float; anything else -> string. An int beyond int64 is an error.
absl::StatusOr<ConfigNode> ResolvePlainScalar(absl::string_view text, Location loc);

// Joins `parent` and `key` into a dotted path ("" + "a" = "a").
std::string JoinKey(absl::string_view parent, absl::string_view key);

// Splits a dotted key ("a.b[2].c", "a.b.2.c") into segments {"a", "b", "2", "c"}, or
// InvalidArgument for empty segments and malformed brackets.
absl::StatusOr<std::vector<std::string>> SplitKey(absl::string_view key);

namespace config_internal {

// Conversion of one node to T, with an error naming the node on mismatch.
template <typename T, typename Enable = void>
struct Convert;

absl::Status TypeError(const ConfigNode& node, absl::string_view expected);

template <>
struct Convert<std::string> {
  static absl::StatusOr<std::string> Do(const ConfigNode& n);
};
template <>
struct Convert<bool> {
  static absl::StatusOr<bool> Do(const ConfigNode& n);
};
template <>
struct Convert<int64_t> {
  static absl::StatusOr<int64_t> Do(const ConfigNode& n);
};
template <>
struct Convert<int> {
  static absl::StatusOr<int> Do(const ConfigNode& n);
};
template <>
struct Convert<double> {
  static absl::StatusOr<double> Do(const ConfigNode& n);
};
template <>
struct Convert<float> {
  static absl::StatusOr<float> Do(const ConfigNode& n);
};
template <>
struct Convert<const ConfigNode*> {
  static absl::StatusOr<const ConfigNode*> Do(const ConfigNode& n) { return &n; }
};
template <typename T>
struct Convert<std::vector<T>> {
  static absl::StatusOr<std::vector<T>> Do(const ConfigNode& n) {
    if (!n.IsList()) return TypeError(n, "list");
    std::vector<T> out;
    out.reserve(n.size());
    for (const ConfigNode& item : n.items()) {
      auto v = Convert<T>::Do(item);
      if (!v.ok()) return v.status();
      out.push_back(std::move(v).value());
    }
    return out;
  }
};

}  // namespace config_internal

template <typename T>
absl::StatusOr<T> ConfigNode::As() const {
  return config_internal::Convert<T>::Do(*this);
}

template <typename T>
absl::StatusOr<T> ConfigNode::GetAs(absl::string_view key) const {
  auto node = Get(key);
  if (!node.ok()) return node.status();
  return (*node)->As<T>();
}

template <typename T>
absl::StatusOr<std::optional<T>> ConfigNode::GetOptional(absl::string_view key) const {
  const ConfigNode* node = Find(key);
  if (node == nullptr || node->IsNull()) return std::optional<T>();
  auto v = node->As<T>();
  if (!v.ok()) return v.status();
  return std::optional<T>(std::move(v).value());
}

template <typename T>
absl::StatusOr<T> ConfigNode::GetOr(absl::string_view key, T fallback) const {
  auto v = GetOptional<T>(key);
  if (!v.ok()) return v.status();
  if (!v->has_value()) return fallback;
  return std::move(**v);
}

}  // namespace cctune

#endif  // CCTUNE_CONFIG_NODE_H_
