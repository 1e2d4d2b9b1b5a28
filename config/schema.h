// Schemas: the keys a component (or a recipe's top level) accepts, each with a type, whether
// it is required or has a default, and a one-line doc. Validate() and Registry::Instantiate()
// check configs against them; the docs can be printed from them.
//
//   Schema("cctune.models.llama2c.from_checkpoint", "A llama2.c model")
//       .Required("checkpoint", KeyType::String(), "path of the .bin file")
//       .Default("max_seq_len", KeyType::Int(), ConfigNode::Int(256), "context length")
//       .Optional("tokenizer", KeyType::Component("tokenizer").OrNull(), "its tokenizer")
//       .Default("layout", KeyType::Enum({"grouped", "expanded"}),
//                ConfigNode::String("grouped"), "KV-cache layout");
#ifndef CCTUNE_CONFIG_SCHEMA_H_
#define CCTUNE_CONFIG_SCHEMA_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "config/node.h"

namespace cctune {

class Schema;

// The type a key accepts.
class KeyType {
 public:
  enum class Base {
    kAny,        // anything (nested components are still checked)
    kString,
    kInt,
    kFloat,      // ints are accepted too
    kBool,
    kList,       // of element()
    kMap,        // free-form map
    kObject,     // map checked against object()
    kComponent,  // map with _component_ naming a registered component of component_kind()
    kEnum,       // a string from enum_values()
  };

  static KeyType Any();
  static KeyType String();
  static KeyType Int();
  static KeyType Float();
  static KeyType Bool();
  static KeyType Map();
  static KeyType List(const KeyType& element);
  static KeyType Object(const Schema& schema);
  // `kind` as registries name it ("model", "tokenizer"); "" accepts any registered component.
  static KeyType Component(std::string kind);
  static KeyType Enum(std::vector<std::string> values);

  // The same type, also accepting null.
  KeyType OrNull() const;
  // The same kInt or kFloat type with inclusive bounds. A value outside them is a mismatch
  // naming the range and the value (NaN is outside every range), so that code reading the key
  // can do arithmetic on it without overflow.
  KeyType InRange(double min, double max) const;
  // Only a lower bound, inclusive (AtLeast) or exclusive (GreaterThan), e.g. a positive
  // learning rate; NaN and infinities fail either.
  KeyType AtLeast(double min) const;
  KeyType GreaterThan(double min) const;

  Base base() const { return base_; }
  bool nullable() const { return nullable_; }
  const KeyType& element() const { return *element_; }  // kList
  const Schema& object() const { return *object_; }     // kObject
  const std::string& component_kind() const { return component_kind_; }
  const std::vector<std::string>& enum_values() const { return enum_values_; }
  bool has_range() const { return has_min_ || has_max_; }

  // "" when `node` (of the right kind) is inside the bounds, else "must be in [1, 64], got 0".
  std::string RangeMismatch(const ConfigNode& node) const;

  // For messages and docs: "int", "list of string", "one of grouped|expanded",
  // "model component", "int or null", "int in [1, 1048576]", "float > 0".
  std::string Name() const;

  // Whether `node`'s own shape matches (list elements included; keys inside maps, objects and
  // components are checked by Validate). Returns "" or what is wrong ("expected int, got ...").
  std::string Mismatch(const ConfigNode& node) const;

 private:
  Base base_ = Base::kAny;
  bool nullable_ = false;
  std::shared_ptr<const KeyType> element_;
  std::shared_ptr<const Schema> object_;
  std::string component_kind_;
  std::vector<std::string> enum_values_;
  bool has_min_ = false, has_max_ = false, min_exclusive_ = false;
  double min_ = 0, max_ = 0;
};

// One accepted key.
struct KeySpec {
  std::string name;
  KeyType type;
  bool required = false;
  std::optional<ConfigNode> default_value;  // filled in by Instantiate when the key is absent
  std::string doc;
  // Extra checks on the value (ranges, existing files...); a non-OK message is reported with
  // the key's file:line. Runs during Validate and Instantiate, so keep it cheap.
  std::vector<std::function<absl::Status(const ConfigNode&)>> checks;
};

class Schema {
 public:
  Schema() = default;
  explicit Schema(std::string name, std::string doc = "")
      : name_(std::move(name)), doc_(std::move(doc)) {}

  // A key that must be present.
  Schema& Required(std::string key, KeyType type, std::string doc);
  // A key that may be absent (the factory sees it missing).
  Schema& Optional(std::string key, KeyType type, std::string doc);
  // A key that may be absent and then takes `value`.
  Schema& Default(std::string key, KeyType type, ConfigNode value, std::string doc);
  // An extra check on an already declared key.
  Schema& Check(absl::string_view key, std::function<absl::Status(const ConfigNode&)> check);
  // Keys not declared here are accepted (and not checked) instead of being errors.
  Schema& AllowUnknownKeys();

  const std::string& name() const { return name_; }
  const std::string& doc() const { return doc_; }
  void set_name(std::string name) { name_ = std::move(name); }
  const std::vector<KeySpec>& keys() const { return keys_; }
  const KeySpec* Find(absl::string_view key) const;
  std::vector<std::string> KeyNames() const;
  bool allow_unknown_keys() const { return allow_unknown_keys_; }

  // OK, or what is wrong with the schema itself: duplicate keys, a default of the wrong type,
  // Check() on an undeclared key. Registries refuse such schemas.
  absl::Status CheckDefinition() const;

  // One line per key: "  max_seq_len (int, default 256): context length".
  std::string Describe() const;

 private:
  Schema& Add(KeySpec spec);

  std::string name_;
  std::string doc_;
  std::vector<KeySpec> keys_;
  bool allow_unknown_keys_ = false;
  std::vector<std::string> definition_errors_;
};

}  // namespace cctune

#endif  // CCTUNE_CONFIG_SCHEMA_H_
