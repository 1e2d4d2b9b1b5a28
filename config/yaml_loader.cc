#include "config/yaml_loader.h"

#include <cstring>
#include <exception>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status.h"
#include "yaml-cpp/depthguard.h"
#include "yaml-cpp/eventhandler.h"
#include "yaml-cpp/yaml.h"

namespace cctune {
namespace {

// yaml-cpp decodes the double-quoted escapes "\\N" (U+0085) and "\\_" (U+00A0) to the single
// Latin-1 bytes 0x85 and 0xA0 instead of their UTF-8 encodings. The text it parsed is checked
// UTF-8 (FirstInvalidCharacter), so such a byte that does not continue a UTF-8 sequence came
// from one of those escapes: write it as the two-byte sequence it stands for.
std::string RepairYamlCppEscapes(const std::string& s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = s[i];
    const size_t n = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
                                  : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    bool whole = n != 0 && i + n <= s.size();
    for (size_t k = 1; whole && k < n; ++k) {
      const unsigned char b = s[i + k];
      whole = b >= 0x80 && b <= 0xBF;
    }
    if (whole) {
      out.append(s, i, n);
      i += n;
    } else {
      if (c == 0x85 || c == 0xA0) out.push_back('\xC2');
      out.push_back(static_cast<char>(c));
      ++i;
    }
  }
  return out;
}


constexpr char kTagPrefix[] = "tag:yaml.org,2002:";

// Converts a yaml-cpp tree (checked by Measurer first). `fixed` (when set) overrides every
// location, as for override values.
class Converter {
 public:
  Converter(std::string source, const Location* fixed) : source_(std::move(source)), fixed_(fixed) {}

  ConfigNode Convert(const YAML::Node& y, const Location& loc, const std::string& path) {
    switch (y.Type()) {
      case YAML::NodeType::Undefined:
      case YAML::NodeType::Null:
        return ConfigNode::Null(loc);
      case YAML::NodeType::Scalar:
        return ConvertScalar(y, loc, path);
      case YAML::NodeType::Sequence: {
        CheckContainerTag(y, "seq", loc, path);
        std::vector<ConfigNode> items;
        for (const YAML::Node& item : y) {
          const std::string item_path = absl::StrCat(path, "[", items.size(), "]");
          items.push_back(Convert(item, LocationOf(item.Mark()), item_path));
        }
        return ConfigNode::List(std::move(items), loc);
      }
      case YAML::NodeType::Map: {
        CheckContainerTag(y, "map", loc, path);
        std::vector<ConfigNode::Entry> entries;
        absl::flat_hash_map<std::string, int> key_lines;  // key -> line, for duplicates
        for (auto it = y.begin(); it != y.end(); ++it) {
          const Location key_loc = LocationOf(it->first.Mark());
          if (!it->first.IsScalar()) {
            Fail(key_loc, path, it->first.IsNull()
                                    ? "a map key is null (quote it to use the word as a key)"
                                    : "map keys must be plain strings, not lists or maps");
            continue;
          }
          const std::string key = RepairYamlCppEscapes(it->first.Scalar());
          const std::string key_path = JoinKey(path, key);
          if (key.empty()) {
            Fail(key_loc, path, "empty map key");
            continue;
          }
          if (key.find_first_of(".[]") != std::string::npos) {
            Fail(key_loc, key_path, "keys may not contain '.', '[' or ']' (they separate parts "
                                    "of dotted keys)");
            continue;
          }
          const auto [first, inserted] = key_lines.emplace(key, key_loc.line);
          if (!inserted) {
            Fail(key_loc, key_path,
                 absl::StrCat("duplicate key (first defined at line ", first->second, ")"));
            continue;
          }
          // A value's own mark points past an empty value; the key's line is what users expect.
          entries.emplace_back(key, Convert(it->second, key_loc, key_path));
        }
        return ConfigNode::Map(std::move(entries), loc);
      }
    }
    return ConfigNode::Null(loc);
  }

  Location LocationOf(const YAML::Mark& mark) const {
    if (fixed_ != nullptr) return *fixed_;
    if (mark.is_null()) return Location{source_, 0, 0};
    return Location{source_, mark.line + 1, mark.column + 1};
  }

  std::vector<ConfigError>& errors() { return errors_; }

 private:
  void Fail(const Location& loc, const std::string& key, std::string message) {
    errors_.push_back(ConfigError{loc, key, std::move(message)});
  }

  void CheckContainerTag(const YAML::Node& y, const char* expected, const Location& loc,
                         const std::string& path) {
    const std::string& tag = y.Tag();
    if (tag.empty() || tag == "?" || tag == "!" || tag == absl::StrCat(kTagPrefix, expected)) {
      return;
    }
    Fail(loc, path, absl::StrCat("unsupported YAML tag '", tag, "'"));
  }

  ConfigNode ConvertScalar(const YAML::Node& y, const Location& loc, const std::string& path) {
    const std::string& tag = y.Tag();
    const std::string text = RepairYamlCppEscapes(y.Scalar());
    if (tag == "!" || tag == absl::StrCat(kTagPrefix, "str")) {
      return ConfigNode::String(text, loc);  // quoted or explicitly a string
    }
    if (tag == absl::StrCat(kTagPrefix, "null")) return ConfigNode::Null(loc);
    auto typed = ResolvePlainScalar(text, loc);
    if (!typed.ok()) {
      errors_.push_back(ConfigError{loc, path, std::string(typed.status().message())});
      return ConfigNode::Null(loc);
    }
    if (tag == "?" || tag.empty()) return *std::move(typed);
    // Explicit !!int / !!float / !!bool: the text must read as that type.
    const ConfigNode::Kind kind = typed->kind();
    if (tag == absl::StrCat(kTagPrefix, "int") && kind == ConfigNode::Kind::kInt) return *typed;
    if (tag == absl::StrCat(kTagPrefix, "bool") && kind == ConfigNode::Kind::kBool) return *typed;
    if (tag == absl::StrCat(kTagPrefix, "float")) {
      if (kind == ConfigNode::Kind::kFloat) return *typed;
      if (kind == ConfigNode::Kind::kInt) {
        return ConfigNode::Scalar(ConfigNode::Kind::kFloat, text, loc);
      }
    }
    if (tag.rfind(kTagPrefix, 0) == 0) {
      Fail(loc, path, absl::StrCat("'", text, "' is not a valid !!", tag.substr(strlen(kTagPrefix))));
    } else {
      Fail(loc, path, absl::StrCat("unsupported YAML tag '", tag, "'"));
    }
    return ConfigNode::Null(loc);
  }

  std::string source_;
  const Location* fixed_;
  std::vector<ConfigError> errors_;
};

// Checks a yaml-cpp tree before it is converted: nesting depth, aliases that refer to a value
// containing them (yaml-cpp builds those as cycles) and the number of values once aliases are
// copied in (each alias use is a full copy, so a few hundred bytes can stand for 10^9 values).
// Uses no memory beyond the path from the root, so a hostile text fails before anything is
// built.
class Measurer {
 public:
  explicit Measurer(const Converter* converter) : converter_(converter) {}

  // OK, or InvalidArgument naming the source, line and limit.
  absl::Status Measure(const YAML::Node& y, int depth) {
    if (++values_ > kMaxConfigValues) {
      return Error(y, absl::StrCat("the config expands to more than ", kMaxConfigValues,
                                   " values (the limit); aliases (*name) copy their anchor's "
                                   "whole value each time they are used"));
    }
    if (!y.IsSequence() && !y.IsMap()) return absl::OkStatus();
    if (depth > kMaxConfigDepth) {
      return Error(y, absl::StrCat("lists and maps are nested more than ", kMaxConfigDepth,
                                   " levels deep (the limit)"));
    }
    for (const YAML::Node& ancestor : path_) {
      if (ancestor.is(y)) {
        return Error(y, "an alias (*name) refers to a value that contains it, which would "
                        "be infinitely deep");
      }
    }
    path_.push_back(y);
    if (y.IsSequence()) {
      for (const YAML::Node& item : y) CCTUNE_RETURN_IF_ERROR(Measure(item, depth + 1));
    } else {
      for (auto it = y.begin(); it != y.end(); ++it) {
        if (!it->first.IsScalar()) continue;  // reported by the converter
        CCTUNE_RETURN_IF_ERROR(Measure(it->second, depth + 1));
      }
    }
    path_.pop_back();
    return absl::OkStatus();
  }

 private:
  absl::Status Error(const YAML::Node& y, absl::string_view message) const;

  const Converter* converter_;
  std::vector<YAML::Node> path_;  // containers from the root to the node being measured
  int64_t values_ = 0;
};

absl::Status Measurer::Error(const YAML::Node& y, absl::string_view message) const {
  return absl::InvalidArgumentError(
      absl::StrCat(converter_->LocationOf(y.Mark()).ToString(), ": ", message));
}

// Counts the documents of a YAML stream, at most kMaxDocuments of them. yaml-cpp 0.7's
// YAML::LoadAll loops forever, allocating a null document per turn, on a ',' outside flow
// collections (",", "- a\n,"; jbeder/yaml-cpp#1040, fixed upstream by #1319): the parser
// reports a null document without consuming the token. Two such documents in a row at the
// same mark are that case, reported as malformed YAML.
class DocumentCounter final : public YAML::EventHandler {
 public:
  static constexpr int kMaxDocuments = 3;

  // The number of documents (<= kMaxDocuments), or the mark of a token yaml-cpp cannot
  // get past in *stuck_at.
  int Count(const std::string& text, YAML::Mark* stuck_at) {
    std::istringstream in(text);
    YAML::Parser parser(in);
    int n = 0;
    YAML::Mark previous_null;
    bool previous_was_lone_null = false;
    while (n < kMaxDocuments) {
      events_ = 0;
      lone_null_ = false;
      if (!parser.HandleNextDocument(*this)) break;
      ++n;
      if (lone_null_ && events_ == 1) {
        if (previous_was_lone_null && previous_null.pos == null_mark_.pos) {
          *stuck_at = null_mark_;
          return -1;
        }
        previous_was_lone_null = true;
        previous_null = null_mark_;
      } else {
        previous_was_lone_null = false;
      }
    }
    return n;
  }

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override {
    if (events_++ == 0) {
      lone_null_ = true;
      null_mark_ = mark;
    }
  }
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override { ++events_; }
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {
    ++events_;
  }
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    ++events_;
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    ++events_;
  }
  void OnMapEnd() override {}

 private:
  int events_ = 0;
  bool lone_null_ = false;
  YAML::Mark null_mark_;
};

// The first byte of `s` where it stops being YAML's character set: well-formed UTF-8 (no
// overlong forms, surrogates or code points past U+10FFFF) without control characters other
// than tab, LF, CR and NEL, nor U+FFFE / U+FFFF. npos when all of it is; *why says what is
// wrong otherwise.
size_t FirstInvalidCharacter(absl::string_view s, std::string* why) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = s[i];
    uint32_t cp = c;
    size_t n = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // range of the second byte
    if (c < 0x80) {
      n = 0;
    } else if (c >= 0xC2 && c <= 0xDF) {
      n = 1;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2;
      cp = c & 0x0F;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3;
      cp = c & 0x07;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      *why = absl::StrCat("not UTF-8 text (byte 0x", absl::Hex(c, absl::kZeroPad2), ")");
      return i;
    }
    for (size_t k = 1; k <= n; ++k) {
      const unsigned char b = i + k < s.size() ? s[i + k] : 0;
      if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) {
        *why = absl::StrCat("not UTF-8 text (byte 0x", absl::Hex(c, absl::kZeroPad2), ")");
        return i;
      }
      cp = (cp << 6) | (b & 0x3F);
    }
    const bool control = (cp < 0x20 && cp != '\t' && cp != '\n' && cp != '\r') ||
                         cp == 0x7F || (cp >= 0x80 && cp <= 0x9F && cp != 0x85);
    if (control || cp == 0xFFFE || cp == 0xFFFF) {
      *why = absl::StrCat(control ? "control character" : "non-character", " U+",
                          absl::Hex(cp, absl::kZeroPad4),
                          " (YAML allows none but tab, LF and CR; write it as an escape in a "
                          "double-quoted string)");
      return i;
    }
    i += n + 1;
  }
  return absl::string_view::npos;
}

// Runs yaml-cpp on `text`; exceptions become Status naming `source` and the position.
absl::StatusOr<std::vector<YAML::Node>> ParseDocuments(absl::string_view text,
                                                       const std::string& source,
                                                       const Location* fixed) {
  // A config is UTF-8 text without control characters, as PyYAML reads torchtune's: yaml-cpp
  // would pass other bytes through (reading a leading FE FF as a UTF-16 mark, turning a NUL
  // into half a character), giving strings that print as YAML which loads back differently.
  std::string why;
  if (const size_t bad = FirstInvalidCharacter(text, &why); bad != absl::string_view::npos) {
    Location loc = fixed != nullptr ? *fixed : Location{source, 1, 1};
    if (fixed == nullptr) {
      for (size_t i = 0; i < bad; ++i) {
        if (text[i] == '\n') {
          ++loc.line;
          loc.column = 1;
        } else {
          ++loc.column;
        }
      }
    }
    return absl::InvalidArgumentError(absl::StrCat(loc.ToStringWithColumn(), ": ", why));
  }
  try {
    const std::string copy(text);
    YAML::Mark stuck;
    const int count = DocumentCounter().Count(copy, &stuck);
    if (count < 0) {
      const Location loc =
          fixed != nullptr ? *fixed : Location{source, stuck.line + 1, stuck.column + 1};
      return absl::InvalidArgumentError(absl::StrCat(
          loc.ToStringWithColumn(), ": malformed YAML: unexpected ',' outside a [list] or {map}"));
    }
    if (count == 0) return std::vector<YAML::Node>();
    // More than one document: the caller reports it; their number need not be exact.
    std::vector<YAML::Node> docs(count > 1 ? count : 0);
    if (count == 1) docs.push_back(YAML::Load(copy));
    return docs;
  } catch (const YAML::DeepRecursion& e) {
    Location loc = fixed != nullptr ? *fixed : Location{source, 0, 0};
    if (fixed == nullptr && !e.mark.is_null()) loc.line = e.mark.line + 1;
    return absl::InvalidArgumentError(
        absl::StrCat(loc.ToString(), ": lists and maps are nested more than ", kMaxConfigDepth,
                     " levels deep (the limit)"));
  } catch (const YAML::Exception& e) {
    Location loc = fixed != nullptr ? *fixed : Location{source, 0, 0};
    if (fixed == nullptr && !e.mark.is_null()) {
      loc.line = e.mark.line + 1;
      loc.column = e.mark.column + 1;
    }
    return absl::InvalidArgumentError(
        absl::StrCat(loc.ToStringWithColumn(), ": malformed YAML: ", e.msg));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(fixed != nullptr ? fixed->ToString() : source, ": malformed YAML: ",
                     e.what()));
  }
}

}  // namespace

absl::StatusOr<ConfigNode> LoadYamlString(absl::string_view yaml, const std::string& source) {
  CCTUNE_ASSIGN_OR_RETURN(std::vector<YAML::Node> docs, ParseDocuments(yaml, source, nullptr));
  if (docs.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": holds ", docs.size(),
        docs.size() >= DocumentCounter::kMaxDocuments ? " or more" : "",
        " YAML documents ('---'); a config is one document"));
  }
  Converter converter(source, nullptr);
  ConfigNode root = ConfigNode::Map({}, Location{source, docs.empty() ? 0 : 1, 0});
  if (!docs.empty() && !docs[0].IsNull()) {
    try {
      if (!docs[0].IsMap()) {
        const Location loc = converter.LocationOf(docs[0].Mark());
        return absl::InvalidArgumentError(absl::StrCat(
            loc.ToString(), ": the top level of a config must be a map of keys, not a ",
            docs[0].IsSequence() ? "list" : "scalar"));
      }
      CCTUNE_RETURN_IF_ERROR(Measurer(&converter).Measure(docs[0], 1));
      root = converter.Convert(docs[0], Location{source, 1, 1}, "");
    } catch (const std::exception& e) {  // yaml-cpp should not throw here; never let it escape
      return absl::InvalidArgumentError(absl::StrCat(source, ": malformed YAML: ", e.what()));
    }
  }
  CCTUNE_RETURN_IF_ERROR(ErrorsToStatus(converter.errors()));
  root.RefreshPaths("");
  return root;
}

absl::StatusOr<ConfigNode> LoadYamlFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open config file '", path, "'"));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading config file '", path, "'"));
  return LoadYamlString(text.str(), path);
}

absl::StatusOr<ConfigNode> ParseYamlValue(absl::string_view text, const Location& loc) {
  CCTUNE_ASSIGN_OR_RETURN(std::vector<YAML::Node> docs,
                          ParseDocuments(text, loc.source, &loc));
  if (docs.size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(loc.ToString(), ": a value may not hold several YAML documents"));
  }
  if (docs.empty()) return ConfigNode::Null(loc);
  Converter converter(loc.source, &loc);
  ConfigNode value;
  try {
    CCTUNE_RETURN_IF_ERROR(Measurer(&converter).Measure(docs[0], 1));
    value = converter.Convert(docs[0], loc, "");
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(loc.ToString(), ": malformed YAML: ", e.what()));
  }
  CCTUNE_RETURN_IF_ERROR(ErrorsToStatus(converter.errors()));
  return value;
}

}  // namespace cctune
