#include "config/node.h"

#include <cerrno>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status.h"

namespace cctune {

// ---------------------------------------------------------------------------------------------
// Locations and errors.

std::string Location::ToString() const {
  if (source.empty()) return "<unknown>";
  if (line <= 0) return source;
  return absl::StrCat(source, ":", line);
}

std::string Location::ToStringWithColumn() const {
  if (line <= 0 || column <= 0) return ToString();
  return absl::StrCat(ToString(), ":", column);
}

std::string ConfigError::ToString() const {
  if (key.empty()) return absl::StrCat(location.ToString(), ": ", message);
  return absl::StrCat(location.ToString(), ": key '", key, "': ", message);
}

absl::Status ErrorsToStatus(const std::vector<ConfigError>& errors) {
  if (errors.empty()) return absl::OkStatus();
  if (errors.size() == 1) return absl::InvalidArgumentError(errors[0].ToString());
  // A hostile config can hold 10^5 problems; the first ones say what is wrong.
  constexpr size_t kMaxListed = 100;
  std::string msg = absl::StrCat(errors.size(), " problems in the config:");
  for (size_t i = 0; i < errors.size() && i < kMaxListed; ++i) {
    absl::StrAppend(&msg, "\n  ", errors[i].ToString());
  }
  if (errors.size() > kMaxListed) {
    absl::StrAppend(&msg, "\n  ... and ", errors.size() - kMaxListed, " more");
  }
  return absl::InvalidArgumentError(msg);
}

// ---------------------------------------------------------------------------------------------
// Plain scalar typing.

namespace {

std::string WithoutUnderscores(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c != '_') out.push_back(c);
  }
  return out;
}

// Parses the digits of an int literal in `base` after the sign and prefix were removed.
bool ParseUnsigned(absl::string_view digits, int base, uint64_t* out) {
  const std::string clean = WithoutUnderscores(digits);
  if (clean.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(clean.c_str(), &end, base);
  if (errno == ERANGE || end != clean.c_str() + clean.size()) return false;
  *out = v;
  return true;
}

std::string FormatDouble(double v) {
  if (std::isnan(v)) return ".nan";
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  char buf[64];
  // Shortest spelling that reads back to the same double.
  for (int precision = 6; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // keep it a float
  return s;
}


bool OneOf(absl::string_view s, std::initializer_list<absl::string_view> words) {
  for (absl::string_view w : words) {
    if (s == w) return true;
  }
  return false;
}

// Consumes characters of `set` from the front of *s; returns how many.
size_t Span(absl::string_view* s, absl::string_view set) {
  size_t n = 0;
  while (n < s->size() && set.find((*s)[n]) != absl::string_view::npos) ++n;
  s->remove_prefix(n);
  return n;
}

constexpr absl::string_view kDigitsOrUnderscore = "0123456789_";
constexpr absl::string_view kDigits = "0123456789";

void SkipSign(absl::string_view* s) {
  if (!s->empty() && ((*s)[0] == '-' || (*s)[0] == '+')) s->remove_prefix(1);
}

size_t CountUnderscores(absl::string_view s) {
  size_t n = 0;
  for (char c : s) n += c == '_';
  return n;
}

// Matches an integer literal; sets the base and the length of its prefix ("0x", "0b", "0").
bool MatchInt(absl::string_view s, int* base, size_t* prefix) {
  SkipSign(&s);
  const absl::string_view s0 = s;  // digits must not be all underscores
  if (s.empty()) return false;
  if (s == "0") {
    *base = 10;
    *prefix = 0;
    return true;
  }
  if (s[0] >= '1' && s[0] <= '9') {  // [1-9][0-9_]*
    s.remove_prefix(1);
    Span(&s, kDigitsOrUnderscore);
    *base = 10;
    *prefix = 0;
    return s.empty();
  }
  if (s[0] != '0') return false;
  if (s.size() > 1 && s[1] == 'x') {  // 0x[0-9a-fA-F_]+
    s.remove_prefix(2);
    *base = 16;
    *prefix = 2;
    return Span(&s, "0123456789abcdefABCDEF_") > CountUnderscores(s0) && s.empty();
  }
  if (s.size() > 1 && s[1] == 'b') {  // 0b[01_]+
    s.remove_prefix(2);
    *base = 2;
    *prefix = 2;
    return Span(&s, "01_") > CountUnderscores(s0) && s.empty();
  }
  s.remove_prefix(1);  // 0[0-7_]+ (YAML 1.1 octal)
  *base = 8;
  *prefix = 1;
  return Span(&s, "01234567_") > CountUnderscores(s0) && s.empty();
}

// [eE][-+]?[0-9]+ at the front of *s.
bool MatchExponent(absl::string_view* s) {
  if (s->empty() || ((*s)[0] != 'e' && (*s)[0] != 'E')) return false;
  s->remove_prefix(1);
  SkipSign(s);
  return Span(s, kDigits) > 0;
}

// OmegaConf's float forms: 1.5, 1., 1.5e3, 1e-5, .5, .5e3 (all signed), [-+].inf, .nan.
bool MatchFloat(absl::string_view s) {
  if (OneOf(s, {".nan", ".NaN", ".NAN"})) return true;
  SkipSign(&s);
  if (OneOf(s, {".inf", ".Inf", ".INF"})) return true;
  if (s.empty()) return false;
  if (s[0] == '.') {  // \.[0-9_]+ exponent?
    s.remove_prefix(1);
    if (Span(&s, kDigitsOrUnderscore) == 0) return false;
    return s.empty() || (MatchExponent(&s) && s.empty());
  }
  if (kDigits.find(s[0]) == absl::string_view::npos) return false;
  Span(&s, kDigitsOrUnderscore);
  if (!s.empty() && s[0] == '.') {  // [0-9][0-9_]*\.[0-9_]* exponent?
    s.remove_prefix(1);
    Span(&s, kDigitsOrUnderscore);
    return s.empty() || (MatchExponent(&s) && s.empty());
  }
  return MatchExponent(&s) && s.empty();  // [0-9][0-9_]* exponent
}

}  // namespace

absl::StatusOr<ConfigNode> ResolvePlainScalar(absl::string_view text, Location loc) {
  const std::string s(text);
  if (OneOf(s, {"", "~", "null", "Null", "NULL"})) {
    return ConfigNode::Scalar(ConfigNode::Kind::kNull, s, std::move(loc));
  }
  if (OneOf(s, {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON", "false", "False",
                "FALSE", "no", "No", "NO", "off", "Off", "OFF"})) {
    return ConfigNode::Scalar(ConfigNode::Kind::kBool, s, std::move(loc));
  }
  int base = 0;
  size_t prefix = 0;
  if (MatchInt(s, &base, &prefix)) {
    const bool negative = s[0] == '-';
    const size_t sign = (s[0] == '-' || s[0] == '+') ? 1 : 0;
    uint64_t magnitude = 0;
    const uint64_t limit = negative ? uint64_t{1} << 63 : (uint64_t{1} << 63) - 1;
    if (!ParseUnsigned(absl::string_view(s).substr(sign + prefix), base, &magnitude) ||
        magnitude > limit) {
      return absl::InvalidArgumentError(
          absl::StrCat(loc.ToString(), ": integer ", s, " does not fit in 64 bits"));
    }
    return ConfigNode::Scalar(ConfigNode::Kind::kInt, s, std::move(loc));
  }
  if (MatchFloat(s)) return ConfigNode::Scalar(ConfigNode::Kind::kFloat, s, std::move(loc));
  return ConfigNode::Scalar(ConfigNode::Kind::kString, s, std::move(loc));
}

// ---------------------------------------------------------------------------------------------
// Construction.

ConfigNode ConfigNode::Null(Location loc) {
  ConfigNode n;
  n.location_ = std::move(loc);
  return n;
}

ConfigNode ConfigNode::Bool(bool v, Location loc) {
  ConfigNode n = Null(std::move(loc));
  n.kind_ = Kind::kBool;
  n.bool_ = v;
  n.text_ = v ? "true" : "false";
  return n;
}

ConfigNode ConfigNode::Int(int64_t v, Location loc) {
  ConfigNode n = Null(std::move(loc));
  n.kind_ = Kind::kInt;
  n.int_ = v;
  n.text_ = absl::StrCat(v);
  return n;
}

ConfigNode ConfigNode::Float(double v, Location loc) {
  ConfigNode n = Null(std::move(loc));
  n.kind_ = Kind::kFloat;
  n.float_ = v;
  n.text_ = FormatDouble(v);
  return n;
}

ConfigNode ConfigNode::String(std::string v, Location loc) {
  ConfigNode n = Null(std::move(loc));
  n.kind_ = Kind::kString;
  n.text_ = std::move(v);
  return n;
}

ConfigNode ConfigNode::List(std::vector<ConfigNode> items, Location loc) {
  ConfigNode n = Null(std::move(loc));
  n.kind_ = Kind::kList;
  n.items_ = std::move(items);
  return n;
}

ConfigNode ConfigNode::Map(std::vector<Entry> entries, Location loc) {
  ConfigNode n = Null(std::move(loc));
  n.kind_ = Kind::kMap;
  n.entries_ = std::move(entries);
  n.RebuildIndex();
  return n;
}

ConfigNode ConfigNode::Scalar(Kind kind, std::string text, Location loc) {
  ConfigNode n = Null(std::move(loc));
  n.kind_ = kind;
  switch (kind) {
    case Kind::kNull:
      break;
    case Kind::kBool: {
      const char c = text.empty() ? 'f' : absl::ascii_tolower(text[0]);
      n.bool_ = c == 't' || c == 'y' || (c == 'o' && text.size() == 2);  // "on", not "off"
      break;
    }
    case Kind::kInt: {
      const bool negative = !text.empty() && text[0] == '-';
      const size_t sign = (!text.empty() && (text[0] == '-' || text[0] == '+')) ? 1 : 0;
      absl::string_view body = absl::string_view(text).substr(sign);
      int base = 10;
      if (body.size() > 1 && body[0] == '0') {
        if (body[1] == 'x') {
          base = 16;
          body.remove_prefix(2);
        } else if (body[1] == 'b') {
          base = 2;
          body.remove_prefix(2);
        } else {
          base = 8;
          body.remove_prefix(1);
        }
      }
      uint64_t magnitude = 0;
      CCTUNE_CHECK(ParseUnsigned(body, base, &magnitude), "bad int spelling '", text, "'");
      n.int_ = negative ? static_cast<int64_t>(0 - magnitude) : static_cast<int64_t>(magnitude);
      break;
    }
    case Kind::kFloat: {
      const std::string lower = absl::AsciiStrToLower(text);
      if (lower.find("nan") != std::string::npos) {
        n.float_ = std::numeric_limits<double>::quiet_NaN();
      } else if (lower.find("inf") != std::string::npos) {
        n.float_ = lower[0] == '-' ? -std::numeric_limits<double>::infinity()
                                   : std::numeric_limits<double>::infinity();
      } else {
        n.float_ = std::strtod(WithoutUnderscores(text).c_str(), nullptr);
      }
      break;
    }
    case Kind::kString:
      break;
    case Kind::kList:
    case Kind::kMap:
      CCTUNE_CHECK(false, "Scalar() of a container kind");
  }
  n.text_ = std::move(text);
  return n;
}

// ---------------------------------------------------------------------------------------------
// Accessors.

bool ConfigNode::IsComponent() const { return IsMap() && Child("_component_") != nullptr; }

std::string ConfigNode::ComponentName() const {
  const ConfigNode* c = IsMap() ? Child("_component_") : nullptr;
  return (c != nullptr && c->kind() == Kind::kString) ? c->string_value() : "";
}

void ConfigNode::RefreshPaths(std::string path) {
  path_ = std::move(path);
  if (kind_ == Kind::kMap && !index_valid_) RebuildIndex();
  for (size_t i = 0; i < items_.size(); ++i) {
    items_[i].RefreshPaths(absl::StrCat(path_, "[", i, "]"));
  }
  for (Entry& e : entries_) e.second.RefreshPaths(JoinKey(path_, e.first));
}

bool ConfigNode::bool_value() const {
  CCTUNE_CHECK(kind_ == Kind::kBool, "bool_value() of ", Describe());
  return bool_;
}

int64_t ConfigNode::int_value() const {
  CCTUNE_CHECK(kind_ == Kind::kInt, "int_value() of ", Describe());
  return int_;
}

double ConfigNode::float_value() const {
  CCTUNE_CHECK(kind_ == Kind::kFloat || kind_ == Kind::kInt, "float_value() of ", Describe());
  return kind_ == Kind::kInt ? static_cast<double>(int_) : float_;
}

const std::string& ConfigNode::string_value() const {
  CCTUNE_CHECK(kind_ == Kind::kString, "string_value() of ", Describe());
  return text_;
}

size_t ConfigNode::size() const {
  if (kind_ == Kind::kList) return items_.size();
  if (kind_ == Kind::kMap) return entries_.size();
  return 0;
}

const std::vector<ConfigNode>& ConfigNode::items() const {
  CCTUNE_CHECK(kind_ == Kind::kList, "items() of ", Describe());
  return items_;
}

std::vector<ConfigNode>& ConfigNode::mutable_items() {
  CCTUNE_CHECK(kind_ == Kind::kList, "mutable_items() of ", Describe());
  return items_;
}

const std::vector<ConfigNode::Entry>& ConfigNode::entries() const {
  CCTUNE_CHECK(kind_ == Kind::kMap, "entries() of ", Describe());
  return entries_;
}

std::vector<ConfigNode::Entry>& ConfigNode::mutable_entries() {
  CCTUNE_CHECK(kind_ == Kind::kMap, "mutable_entries() of ", Describe());
  index_valid_ = false;  // the caller may rename keys; rebuilt by the next non-const lookup
  return entries_;
}

std::vector<std::string> ConfigNode::Keys() const {
  std::vector<std::string> keys;
  for (const Entry& e : entries_) keys.push_back(e.first);
  return keys;
}

std::string ConfigNode::KeysForMessage(size_t max) const {
  std::string out;
  for (size_t i = 0; i < entries_.size() && i < max; ++i) {
    absl::StrAppend(&out, i == 0 ? "" : ", ", entries_[i].first);
  }
  if (entries_.size() > max) absl::StrAppend(&out, ", ... (", entries_.size() - max, " more)");
  return out;
}

void ConfigNode::RebuildIndex() {
  index_.clear();
  index_valid_ = entries_.size() >= kIndexedMapSize;
  if (!index_valid_) return;
  index_.reserve(entries_.size());
  for (size_t i = 0; i < entries_.size(); ++i) index_.emplace(entries_[i].first, i);
}

int64_t ConfigNode::FindEntry(absl::string_view key) const {
  if (index_valid_) {
    auto it = index_.find(key);
    return it == index_.end() ? -1 : static_cast<int64_t>(it->second);
  }
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i].first == key) return static_cast<int64_t>(i);
  }
  return -1;
}

const ConfigNode* ConfigNode::Child(absl::string_view key) const {
  const int64_t i = FindEntry(key);
  return i < 0 ? nullptr : &entries_[i].second;
}

ConfigNode* ConfigNode::MutableChild(absl::string_view key) {
  if (!index_valid_ && entries_.size() >= kIndexedMapSize) RebuildIndex();
  const int64_t i = FindEntry(key);
  return i < 0 ? nullptr : &entries_[i].second;
}

ConfigNode& ConfigNode::Set(std::string key, ConfigNode value) {
  CCTUNE_CHECK(kind_ == Kind::kMap, "Set('", key, "') on ", Describe());
  value.RefreshPaths(JoinKey(path_, key));
  if (ConfigNode* existing = MutableChild(key)) {
    *existing = std::move(value);
    return *existing;
  }
  if (index_valid_) index_.emplace(key, entries_.size());
  entries_.emplace_back(std::move(key), std::move(value));
  if (!index_valid_ && entries_.size() >= kIndexedMapSize) RebuildIndex();
  return entries_.back().second;
}

bool ConfigNode::Erase(absl::string_view key) {
  if (!index_valid_ && entries_.size() >= kIndexedMapSize) RebuildIndex();
  const int64_t i = FindEntry(key);
  if (i < 0) return false;
  entries_.erase(entries_.begin() + i);
  RebuildIndex();  // later positions shift
  return true;
}

namespace {

// Index of a list segment ("2"), or -1.
int64_t ListIndex(absl::string_view segment, size_t size) {
  int64_t i = 0;
  if (!absl::SimpleAtoi(segment, &i) || i < 0 || static_cast<size_t>(i) >= size) return -1;
  return i;
}

}  // namespace

const ConfigNode* ConfigNode::Find(absl::string_view key) const {
  auto segments = SplitKey(key);
  if (!segments.ok()) return nullptr;
  const ConfigNode* node = this;
  for (const std::string& seg : *segments) {
    if (node->IsMap()) {
      node = node->Child(seg);
    } else if (node->IsList()) {
      const int64_t i = ListIndex(seg, node->items_.size());
      node = i < 0 ? nullptr : &node->items_[i];
    } else {
      node = nullptr;
    }
    if (node == nullptr) return nullptr;
  }
  return node;
}

ConfigNode* ConfigNode::FindMutable(absl::string_view key) {
  return const_cast<ConfigNode*>(static_cast<const ConfigNode*>(this)->Find(key));
}

absl::StatusOr<const ConfigNode*> ConfigNode::Get(absl::string_view key) const {
  CCTUNE_ASSIGN_OR_RETURN(std::vector<std::string> segments, SplitKey(key));
  const ConfigNode* node = this;
  std::string walked = path_;
  for (const std::string& seg : segments) {
    const ConfigNode* next = nullptr;
    if (node->IsMap()) {
      next = node->Child(seg);
      if (next == nullptr) {
        std::string where = walked.empty() ? "the config" : absl::StrCat("'", walked, "'");
        return absl::NotFoundError(absl::StrCat(
            node->location().ToString(), ": key '", JoinKey(path_, key), "': missing (",
            where, " has keys: ", node->KeysForMessage(), ")"));
      }
    } else if (node->IsList()) {
      const int64_t i = ListIndex(seg, node->items_.size());
      if (i < 0) {
        return absl::NotFoundError(absl::StrCat(
            node->location().ToString(), ": key '", JoinKey(path_, key), "': no item '", seg,
            "' in '", walked, "', a list of ", node->items_.size(), " items"));
      }
      next = &node->items_[i];
    } else {
      return absl::NotFoundError(absl::StrCat(node->location().ToString(), ": key '",
                                              JoinKey(path_, key), "': missing ('", walked,
                                              "' is ", node->Describe(), ", not a map)"));
    }
    node = next;
    walked = node->path_;
  }
  return node;
}

absl::StatusOr<std::string> ConfigNode::GetString(absl::string_view key) const {
  return GetAs<std::string>(key);
}
absl::StatusOr<int64_t> ConfigNode::GetInt(absl::string_view key) const {
  return GetAs<int64_t>(key);
}
absl::StatusOr<double> ConfigNode::GetFloat(absl::string_view key) const {
  return GetAs<double>(key);
}
absl::StatusOr<bool> ConfigNode::GetBool(absl::string_view key) const { return GetAs<bool>(key); }
absl::StatusOr<std::optional<std::string>> ConfigNode::GetOptionalString(
    absl::string_view key) const {
  return GetOptional<std::string>(key);
}
absl::StatusOr<std::optional<int64_t>> ConfigNode::GetOptionalInt(absl::string_view key) const {
  return GetOptional<int64_t>(key);
}
absl::StatusOr<std::optional<double>> ConfigNode::GetOptionalFloat(absl::string_view key) const {
  return GetOptional<double>(key);
}
absl::StatusOr<std::optional<bool>> ConfigNode::GetOptionalBool(absl::string_view key) const {
  return GetOptional<bool>(key);
}

const char* ConfigNode::KindName(Kind kind) {
  switch (kind) {
    case Kind::kNull:
      return "null";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "string";
    case Kind::kList:
      return "list";
    case Kind::kMap:
      return "map";
  }
  return "?";
}

std::string ConfigNode::Describe() const {
  switch (kind_) {
    case Kind::kNull:
      return "null";
    case Kind::kString: {
      std::string s = text_.size() > 80 ? absl::StrCat(text_.substr(0, 77), "...") : text_;
      return absl::StrCat("string '", s, "'");
    }
    case Kind::kBool:
    case Kind::kInt:
    case Kind::kFloat:
      return absl::StrCat(KindName(kind_), " ", text_);
    case Kind::kList:
      return absl::StrCat("list of ", items_.size(), items_.size() == 1 ? " item" : " items");
    case Kind::kMap:
      if (IsComponent() && !ComponentName().empty()) {
        return absl::StrCat("component '", ComponentName(), "'");
      }
      return absl::StrCat("map with keys {", KeysForMessage(), "}");
  }
  return "?";
}

absl::Status ConfigNode::Error(absl::string_view message) const {
  return absl::InvalidArgumentError(MakeError(std::string(message)).ToString());
}

ConfigError ConfigNode::MakeError(std::string message) const {
  return ConfigError{location_, path_, std::move(message)};
}

// ---------------------------------------------------------------------------------------------
// Conversions.

namespace config_internal {

absl::Status TypeError(const ConfigNode& node, absl::string_view expected) {
  std::string msg = absl::StrCat("expected ", expected, ", got ", node.Describe());
  if (expected == "string" && node.IsScalar() && !node.IsNull()) {
    absl::StrAppend(&msg, " (quote it, e.g. \"", node.text(), "\", to make it a string)");
  } else if ((expected == "int") && node.kind() == ConfigNode::Kind::kString) {
    absl::StrAppend(&msg, " (remove the quotes to make it a number)");
  }
  return node.Error(msg);
}

absl::StatusOr<std::string> Convert<std::string>::Do(const ConfigNode& n) {
  if (n.kind() != ConfigNode::Kind::kString) return TypeError(n, "string");
  return n.string_value();
}

absl::StatusOr<bool> Convert<bool>::Do(const ConfigNode& n) {
  if (n.kind() != ConfigNode::Kind::kBool) return TypeError(n, "bool");
  return n.bool_value();
}

absl::StatusOr<int64_t> Convert<int64_t>::Do(const ConfigNode& n) {
  if (n.kind() != ConfigNode::Kind::kInt) return TypeError(n, "int");
  return n.int_value();
}

absl::StatusOr<int> Convert<int>::Do(const ConfigNode& n) {
  if (n.kind() != ConfigNode::Kind::kInt) return TypeError(n, "int");
  const int64_t v = n.int_value();
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
    return n.Error(absl::StrCat("int ", v, " does not fit in 32 bits"));
  }
  return static_cast<int>(v);
}

absl::StatusOr<double> Convert<double>::Do(const ConfigNode& n) {
  if (n.kind() != ConfigNode::Kind::kFloat && n.kind() != ConfigNode::Kind::kInt) {
    return TypeError(n, "float");
  }
  return n.float_value();
}

absl::StatusOr<float> Convert<float>::Do(const ConfigNode& n) {
  CCTUNE_ASSIGN_OR_RETURN(double v, Convert<double>::Do(n));
  return static_cast<float>(v);
}

}  // namespace config_internal

// ---------------------------------------------------------------------------------------------
// YAML output.

namespace {

// True when `s` can be written unquoted and loads back as the same string.
// Length of a UTF-8 sequence at s[i] that must be written as an escape, or 0: what YAML does
// not allow raw in a stream (C1 controls, U+FFFE, U+FFFF) and what YAML 1.1 readers take for
// a line break (NEL U+0085, LINE and PARAGRAPH SEPARATOR U+2028 / U+2029), which a quoted
// scalar would fold.
size_t DisallowedSequence(const std::string& s, size_t i) {
  const unsigned char c = s[i];
  if (c == 0xC2 && i + 1 < s.size()) {
    const unsigned char b = s[i + 1];
    if (b >= 0x80 && b <= 0x9F) return 2;
  }
  if (c == 0xE2 && i + 2 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x80) {
    const unsigned char b = s[i + 2];
    if (b == 0xA8 || b == 0xA9) return 3;
  }
  if (c == 0xEF && i + 2 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0xBF) {
    const unsigned char b = s[i + 2];
    if (b == 0xBE || b == 0xBF) return 3;
  }
  return 0;
}

bool PlainSafe(const std::string& s) {
  if (s.empty() || s.front() == ' ' || s.back() == ' ' || s.back() == ':') return false;
  // "---" and "..." at the start of a line mark documents (a top-level key is at the start).
  if (s.rfind("---", 0) == 0 || s.rfind("...", 0) == 0) return false;
  if (std::string("-?:,[]{}#&*!|>'\"%@`").find(s.front()) != std::string::npos) {
    // "-foo" and "./x"-like strings are fine plain unless the indicator is followed by space.
    if (!(s.front() == '-' && s.size() > 1 && s[1] != ' ')) return false;
  }
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = s[i];
    if (c < 0x20 || c == 0x7f || DisallowedSequence(s, i) != 0) return false;
    if (c == ':' && i + 1 < s.size() && s[i + 1] == ' ') return false;
    if (c == '#' && i > 0 && s[i - 1] == ' ') return false;
  }
  auto typed = ResolvePlainScalar(s, {});
  return typed.ok() && typed->kind() == ConfigNode::Kind::kString;
}

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = s[i];
    if (const size_t n = DisallowedSequence(s, i); n != 0) {
      // Decode the 2- or 3-byte sequence and write it as \uXXXX.
      uint32_t cp = n == 2 ? (c & 0x1F) : (c & 0x0F);
      for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
      out += buf;
      i += n - 1;
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\x%02x", c);
          out += buf;
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  return out + "\"";
}

std::string ScalarYaml(const ConfigNode& n) {
  switch (n.kind()) {
    case ConfigNode::Kind::kNull:
      return "null";
    case ConfigNode::Kind::kString:
      return PlainSafe(n.string_value()) ? n.string_value() : Quote(n.string_value());
    case ConfigNode::Kind::kFloat: {
      // The source spelling, unless it reads back as another kind ("!!float 3" -> "3").
      auto typed = ResolvePlainScalar(n.text(), {});
      if (typed.ok() && typed->kind() == ConfigNode::Kind::kFloat) return n.text();
      return FormatDouble(n.float_value());
    }
    default:
      return n.text();
  }
}

bool IsBlock(const ConfigNode& n) { return (n.IsMap() || n.IsList()) && n.size() > 0; }

std::string KeyYaml(const std::string& k) { return PlainSafe(k) ? k : Quote(k); }

// The longest key written as an implicit "key: value" (YAML 1.2 section 7.4.2 allows 1024
// characters; yaml-cpp rejects longer ones).
constexpr size_t kMaxImplicitKeyChars = 1000;

}  // namespace

void ConfigNode::AppendYaml(int indent, std::string* out) const {
  const std::string pad(indent, ' ');
  if (kind_ == Kind::kMap && !entries_.empty()) {
    for (const Entry& e : entries_) {
      const std::string key = KeyYaml(e.first);
      if (key.size() > kMaxImplicitKeyChars) {
        // YAML limits implicit keys to 1024 characters; a longer one is an explicit "? key".
        absl::StrAppend(out, pad, "? ", key, "\n", pad, ":");
      } else {
        absl::StrAppend(out, pad, key, ":");
      }
      if (IsBlock(e.second)) {
        out->push_back('\n');
        e.second.AppendYaml(indent + 2, out);
      } else {
        absl::StrAppend(out, " ", e.second.IsMap() ? "{}" : e.second.IsList() ? "[]"
                                                          : ScalarYaml(e.second),
                        "\n");
      }
    }
  } else if (kind_ == Kind::kList && !items_.empty()) {
    for (const ConfigNode& item : items_) {
      if (IsBlock(item)) {
        // Render the item two columns deeper, then put "- " into its first line's indent.
        std::string sub;
        item.AppendYaml(indent + 2, &sub);
        sub[indent] = '-';
        absl::StrAppend(out, sub);
      } else {
        absl::StrAppend(out, pad, "- ",
                        item.IsMap() ? "{}" : item.IsList() ? "[]" : ScalarYaml(item), "\n");
      }
    }
  } else {
    absl::StrAppend(out, pad, kind_ == Kind::kMap ? "{}" : kind_ == Kind::kList ? "[]"
                                                                                : ScalarYaml(*this),
                    "\n");
  }
}

int ConfigNode::Depth() const {
  if (kind_ != Kind::kList && kind_ != Kind::kMap) return 0;
  int below = 0;
  for (const ConfigNode& item : items_) below = std::max(below, item.Depth());
  for (const Entry& e : entries_) below = std::max(below, e.second.Depth());
  return below + 1;
}

std::string ConfigNode::ToYaml() const {
  std::string out;
  AppendYaml(0, &out);
  return out;
}

bool ConfigNode::operator==(const ConfigNode& other) const {
  if (kind_ != other.kind_) return false;
  switch (kind_) {
    case Kind::kNull:
      return true;
    case Kind::kBool:
      return bool_ == other.bool_;
    case Kind::kInt:
      return int_ == other.int_;
    case Kind::kFloat:
      return float_ == other.float_ || (std::isnan(float_) && std::isnan(other.float_));
    case Kind::kString:
      return text_ == other.text_;
    case Kind::kList:
      return items_ == other.items_;
    case Kind::kMap:
      if (entries_.size() != other.entries_.size()) return false;
      for (size_t i = 0; i < entries_.size(); ++i) {
        if (entries_[i].first != other.entries_[i].first ||
            entries_[i].second != other.entries_[i].second) {
          return false;
        }
      }
      return true;
  }
  return false;
}

// ---------------------------------------------------------------------------------------------
// Keys.

std::string JoinKey(absl::string_view parent, absl::string_view key) {
  if (parent.empty()) return std::string(key);
  return absl::StrCat(parent, ".", key);
}

absl::StatusOr<std::vector<std::string>> SplitKey(absl::string_view key) {
  std::vector<std::string> out;
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("malformed key '", key, "': ", why));
  };
  if (key.empty()) return bad("empty");
  size_t i = 0;
  std::string current;
  bool after_bracket = false;  // "a[0]" ends a segment; only '.', '[' or end may follow
  while (i < key.size()) {
    const char c = key[i];
    if (c == '.') {
      if (current.empty() && !after_bracket) return bad("empty segment");
      if (!current.empty()) out.push_back(std::move(current));
      current.clear();
      after_bracket = false;
      ++i;
      if (i == key.size()) return bad("ends with '.'");
    } else if (c == '[') {
      if (current.empty() && !after_bracket) return bad("'[' without a key before it");
      if (!current.empty()) out.push_back(std::move(current));
      current.clear();
      const size_t close = key.find(']', i);
      if (close == absl::string_view::npos) return bad("'[' without ']'");
      const absl::string_view index = key.substr(i + 1, close - i - 1);
      int64_t v;
      if (!absl::SimpleAtoi(index, &v) || v < 0) return bad("list index must be an integer");
      out.emplace_back(index);
      i = close + 1;
      after_bracket = true;
    } else if (c == ']') {
      return bad("']' without '['");
    } else {
      if (after_bracket) return bad("expected '.' or '[' after ']'");
      current.push_back(c);
      ++i;
    }
  }
  if (!current.empty()) out.push_back(std::move(current));
  return out;
}

}  // namespace cctune
