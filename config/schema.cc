#include "config/schema.h"

#include <cmath>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace cctune {

KeyType KeyType::Any() { return KeyType(); }

KeyType KeyType::String() {
  KeyType t;
  t.base_ = Base::kString;
  return t;
}

KeyType KeyType::Int() {
  KeyType t;
  t.base_ = Base::kInt;
  return t;
}

KeyType KeyType::Float() {
  KeyType t;
  t.base_ = Base::kFloat;
  return t;
}

KeyType KeyType::Bool() {
  KeyType t;
  t.base_ = Base::kBool;
  return t;
}

KeyType KeyType::Map() {
  KeyType t;
  t.base_ = Base::kMap;
  return t;
}

KeyType KeyType::List(const KeyType& element) {
  KeyType t;
  t.base_ = Base::kList;
  t.element_ = std::make_shared<const KeyType>(element);
  return t;
}

KeyType KeyType::Object(const Schema& schema) {
  KeyType t;
  t.base_ = Base::kObject;
  t.object_ = std::make_shared<const Schema>(schema);
  return t;
}

KeyType KeyType::Component(std::string kind) {
  KeyType t;
  t.base_ = Base::kComponent;
  t.component_kind_ = std::move(kind);
  return t;
}

KeyType KeyType::Enum(std::vector<std::string> values) {
  KeyType t;
  t.base_ = Base::kEnum;
  t.enum_values_ = std::move(values);
  return t;
}

KeyType KeyType::OrNull() const {
  KeyType t = *this;
  t.nullable_ = true;
  return t;
}

KeyType KeyType::InRange(double min, double max) const {
  KeyType t = AtLeast(min);
  t.has_max_ = true;
  t.max_ = max;
  return t;
}

KeyType KeyType::AtLeast(double min) const {
  KeyType t = *this;
  t.has_min_ = true;
  t.min_exclusive_ = false;
  t.min_ = min;
  return t;
}

KeyType KeyType::GreaterThan(double min) const {
  KeyType t = AtLeast(min);
  t.min_exclusive_ = true;
  return t;
}

namespace {

// A bound as users read it: "1048576", "0.5", "1e+30".
std::string BoundText(double v, bool is_int) {
  if (is_int && std::fabs(v) < 9.0e18) return absl::StrCat(static_cast<int64_t>(v));
  return absl::StrCat(v);
}

}  // namespace

std::string KeyType::RangeMismatch(const ConfigNode& node) const {
  using Kind = ConfigNode::Kind;
  if (!has_range() || (node.kind() != Kind::kInt && node.kind() != Kind::kFloat)) return "";
  const bool is_int = base_ == Base::kInt;
  bool ok = true;
  if (node.kind() == Kind::kInt) {
    // Exact for every int64: compare in long double, which holds 64-bit integers.
    const long double v = static_cast<long double>(node.int_value());
    if (has_min_) ok = ok && (min_exclusive_ ? v > min_ : v >= min_);
    if (has_max_) ok = ok && v <= max_;
  } else {
    const double v = node.float_value();
    ok = std::isfinite(v);
    if (has_min_) ok = ok && (min_exclusive_ ? v > min_ : v >= min_);
    if (has_max_) ok = ok && v <= max_;
  }
  if (ok) return "";
  std::string range;
  if (has_min_ && has_max_) {
    range = absl::StrCat("in ", min_exclusive_ ? "(" : "[", BoundText(min_, is_int), ", ",
                         BoundText(max_, is_int), "]");
  } else if (has_min_) {
    range = absl::StrCat(min_exclusive_ ? "> " : ">= ", BoundText(min_, is_int));
  } else {
    range = absl::StrCat("<= ", BoundText(max_, is_int));
  }
  if (node.kind() == Kind::kFloat) absl::StrAppend(&range, " and finite");
  const std::string value =
      node.text().empty() ? absl::StrCat(node.float_value()) : node.text();
  return absl::StrCat("must be ", range, ", got ", value);
}

std::string KeyType::Name() const {
  std::string name;
  switch (base_) {
    case Base::kAny:
      return "any value";
    case Base::kString:
      name = "string";
      break;
    case Base::kInt:
      name = "int";
      break;
    case Base::kFloat:
      name = "float";
      break;
    case Base::kBool:
      name = "bool";
      break;
    case Base::kMap:
      name = "map";
      break;
    case Base::kList:
      name = absl::StrCat("list of ", element_->Name());
      break;
    case Base::kObject:
      name = object_->name().empty() ? "map" : absl::StrCat(object_->name(), " map");
      break;
    case Base::kComponent:
      name = component_kind_.empty() ? "component" : absl::StrCat(component_kind_, " component");
      break;
    case Base::kEnum:
      name = absl::StrCat("one of ", absl::StrJoin(enum_values_, "|"));
      break;
  }
  if (has_min_ && has_max_) {
    absl::StrAppend(&name, " in ", min_exclusive_ ? "(" : "[",
                    BoundText(min_, base_ == Base::kInt), ", ",
                    BoundText(max_, base_ == Base::kInt), "]");
  } else if (has_min_) {
    absl::StrAppend(&name, min_exclusive_ ? " > " : " >= ", BoundText(min_, base_ == Base::kInt));
  } else if (has_max_) {
    absl::StrAppend(&name, " <= ", BoundText(max_, base_ == Base::kInt));
  }
  if (nullable_) absl::StrAppend(&name, " or null");
  return name;
}

std::string KeyType::Mismatch(const ConfigNode& node) const {
  using Kind = ConfigNode::Kind;
  if (base_ == Base::kAny) return "";
  if (node.IsNull()) {
    return nullable_ ? "" : absl::StrCat("expected ", Name(), ", got null");
  }
  bool ok = false;
  switch (base_) {
    case Base::kAny:
      ok = true;
      break;
    case Base::kString:
      ok = node.kind() == Kind::kString;
      break;
    case Base::kInt:
      ok = node.kind() == Kind::kInt;
      break;
    case Base::kFloat:
      ok = node.kind() == Kind::kFloat || node.kind() == Kind::kInt;
      break;
    case Base::kBool:
      ok = node.kind() == Kind::kBool;
      break;
    case Base::kList:
      ok = node.IsList();
      break;
    case Base::kMap:
    case Base::kObject:
      ok = node.IsMap();
      break;
    case Base::kComponent:
      if (!node.IsMap()) {
        return absl::StrCat("expected ", Name(), " (a map with a _component_ key), got ",
                            node.Describe());
      }
      ok = true;
      break;
    case Base::kEnum:
      if (node.kind() == Kind::kString) {
        for (const std::string& v : enum_values_) ok = ok || v == node.string_value();
      }
      break;
  }
  if (ok) return RangeMismatch(node);
  std::string msg = absl::StrCat("expected ", Name(), ", got ", node.Describe());
  if (base_ == Base::kString && node.IsScalar()) {
    absl::StrAppend(&msg, " (quote it, e.g. \"", node.text(), "\", to make it a string)");
  }
  return msg;
}

Schema& Schema::Add(KeySpec spec) {
  if (Find(spec.name) != nullptr) {
    definition_errors_.push_back(absl::StrCat("key '", spec.name, "' is declared twice"));
    return *this;
  }
  if (spec.name.empty() || spec.name.find_first_of(".[]") != std::string::npos) {
    definition_errors_.push_back(absl::StrCat("bad key name '", spec.name, "'"));
    return *this;
  }
  keys_.push_back(std::move(spec));
  return *this;
}

Schema& Schema::Required(std::string key, KeyType type, std::string doc) {
  KeySpec spec;
  spec.name = std::move(key);
  spec.type = std::move(type);
  spec.required = true;
  spec.doc = std::move(doc);
  return Add(std::move(spec));
}

Schema& Schema::Optional(std::string key, KeyType type, std::string doc) {
  KeySpec spec;
  spec.name = std::move(key);
  spec.type = std::move(type);
  spec.doc = std::move(doc);
  return Add(std::move(spec));
}

Schema& Schema::Default(std::string key, KeyType type, ConfigNode value, std::string doc) {
  KeySpec spec;
  spec.name = std::move(key);
  spec.type = std::move(type);
  spec.doc = std::move(doc);
  spec.default_value = std::move(value);
  return Add(std::move(spec));
}

Schema& Schema::Check(absl::string_view key, std::function<absl::Status(const ConfigNode&)> check) {
  for (KeySpec& spec : keys_) {
    if (spec.name == key) {
      spec.checks.push_back(std::move(check));
      return *this;
    }
  }
  definition_errors_.push_back(absl::StrCat("Check() on undeclared key '", key, "'"));
  return *this;
}

Schema& Schema::AllowUnknownKeys() {
  allow_unknown_keys_ = true;
  return *this;
}

const KeySpec* Schema::Find(absl::string_view key) const {
  for (const KeySpec& spec : keys_) {
    if (spec.name == key) return &spec;
  }
  return nullptr;
}

std::vector<std::string> Schema::KeyNames() const {
  std::vector<std::string> names;
  for (const KeySpec& spec : keys_) names.push_back(spec.name);
  return names;
}

namespace {

// Shallow check of a default value, list elements included.
std::string DefaultMismatch(const KeyType& type, const ConfigNode& value) {
  std::string m = type.Mismatch(value);
  if (!m.empty() || type.base() != KeyType::Base::kList || !value.IsList()) return m;
  for (const ConfigNode& item : value.items()) {
    m = DefaultMismatch(type.element(), item);
    if (!m.empty()) return m;
  }
  return "";
}

}  // namespace

absl::Status Schema::CheckDefinition() const {
  std::vector<std::string> problems = definition_errors_;
  for (const KeySpec& spec : keys_) {
    if (spec.default_value.has_value()) {
      const std::string m = DefaultMismatch(spec.type, *spec.default_value);
      if (!m.empty()) {
        problems.push_back(absl::StrCat("default of key '", spec.name, "': ", m));
      }
    }
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("schema '", name_, "' is malformed: ",
                                                 absl::StrJoin(problems, "; ")));
}

std::string Schema::Describe() const {
  std::string out;
  for (const KeySpec& spec : keys_) {
    std::string what = spec.type.Name();
    if (spec.required) {
      absl::StrAppend(&what, ", required");
    } else if (spec.default_value.has_value()) {
      std::string v = spec.default_value->IsScalar()
                          ? std::string(absl::StripSuffix(spec.default_value->ToYaml(), "\n"))
                          : spec.default_value->Describe();
      absl::StrAppend(&what, ", default ", v);
    } else {
      absl::StrAppend(&what, ", optional");
    }
    absl::StrAppend(&out, "  ", spec.name, " (", what, "): ", spec.doc, "\n");
  }
  if (allow_unknown_keys_) absl::StrAppend(&out, "  (other keys are accepted)\n");
  return out;
}

}  // namespace cctune
