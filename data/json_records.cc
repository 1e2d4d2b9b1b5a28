#include "data/json_records.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status.h"

namespace cctune {
namespace {

using Json = nlohmann::json;

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// 1-based line of byte offset `pos`.
int64_t LineOf(std::string_view text, size_t pos) {
  pos = std::min(pos, text.size());
  int64_t line = 1;
  for (size_t i = 0; i < pos; ++i) line += text[i] == '\n';
  return line;
}

std::string ParseMessage(const std::exception& e) {
  // nlohmann's messages start with "[json.exception.parse_error.101] parse error at line 1,
  // column 5: ..."; keep what follows the bracketed id.
  std::string msg = e.what();
  const size_t close = msg.find("] ");
  if (msg.rfind("[json.exception", 0) == 0 && close != std::string::npos)
    msg = msg.substr(close + 2);
  return msg;
}

// Byte offsets where the top-level array's elements start (text already parsed fine).
std::vector<size_t> ArrayElementStarts(std::string_view text) {
  std::vector<size_t> starts;
  int depth = 0;
  bool in_string = false, escaped = false, expecting = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (depth == 1 && expecting && !IsSpace(c) && c != ']') {
      starts.push_back(i);
      expecting = false;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth == 1) expecting = true;
    } else if (c == ']' || c == '}') {
      --depth;
    } else if (c == ',' && depth == 1) {
      expecting = true;
    }
  }
  return starts;
}

const char* TypeName(const Json& j) { return j.type_name(); }

absl::StatusOr<JsonRecords> ParseArray(std::string_view text, const std::string& file) {
  Json root;
  try {
    root = Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrCat(file, ":",
                                                   LineOf(text, e.byte == 0 ? 0 : e.byte - 1),
                                                   ": malformed JSON: ", ParseMessage(e)));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": malformed JSON: ", ParseMessage(e)));
  }
  const std::vector<size_t> starts = ArrayElementStarts(text);
  CCTUNE_CHECK(root.is_array() && starts.size() == root.size(), "array scan found ", starts.size(),
               " elements, the parser ", root.size());
  JsonRecords out;
  out.file = file;
  out.records.resize(root.size());
  for (size_t i = 0; i < root.size(); ++i) {
    out.records[i].line = LineOf(text, starts[i]);
    if (!root[i].is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(file, ":", out.records[i].line, ": record ", i,
                                                     " is a JSON ", TypeName(root[i]),
                                                     ", expected an object"));
    }
    out.records[i].value = std::move(root[i]);
  }
  return out;
}

absl::StatusOr<JsonRecords> ParseLines(std::string_view text, const std::string& file) {
  struct Line {
    std::string_view text;
    int64_t number;
  };
  std::vector<Line> lines;
  int64_t number = 1;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    bool blank = true;
    for (char c : line) blank = blank && IsSpace(c);
    if (!blank) lines.push_back({line, number});
    ++number;
    start = end + 1;
  }
  JsonRecords out;
  out.file = file;
  out.records.resize(lines.size());
  std::vector<std::string> errors(lines.size());
  const int64_t n = static_cast<int64_t>(lines.size());
#pragma omp parallel for schedule(dynamic, 256) if (n > 4096)
  for (int64_t i = 0; i < n; ++i) {
    const Line& l = lines[i];
    out.records[i].line = l.number;
    try {
      out.records[i].value = Json::parse(l.text.begin(), l.text.end());
    } catch (const std::exception& e) {
      errors[i] = absl::StrCat(file, ":", l.number, ": malformed JSON: ", ParseMessage(e));
      continue;
    }
    if (!out.records[i].value.is_object()) {
      errors[i] = absl::StrCat(file, ":", l.number, ": a JSON ", TypeName(out.records[i].value),
                               ", expected one object per line");
    }
  }
  for (const std::string& e : errors) {
    if (!e.empty()) return absl::InvalidArgumentError(e);
  }
  return out;
}

}  // namespace

std::string JsonRecords::Where(size_t i) const {
  return absl::StrCat(file, ":", i < records.size() ? records[i].line : 0);
}

absl::StatusOr<JsonRecords> ParseJsonRecords(std::string_view text, const std::string& file) {
  if (text.size() >= 3 && text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);  // BOM
  size_t first = 0;
  while (first < text.size() && IsSpace(text[first])) ++first;
  if (first == text.size()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": the dataset file is empty"));
  }
  if (text[first] == '[') return ParseArray(text, file);
  return ParseLines(text, file);
}

absl::StatusOr<std::string> ReadDatasetFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open dataset file '", path, "'"));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading '", path, "'"));
  return ss.str();
}

absl::StatusOr<JsonRecords> ReadJsonRecords(const std::string& path) {
  CCTUNE_ASSIGN_OR_RETURN(const std::string text, ReadDatasetFile(path));
  return ParseJsonRecords(text, path);
}

absl::StatusOr<const nlohmann::json*> GetColumn(const JsonRecords& records, size_t i,
                                                const std::string& column,
                                                const std::string& mapped_from) {
  const Json& obj = records.records[i].value;
  auto it = obj.find(column);
  if (it != obj.end()) return &*it;
  std::vector<std::string> keys;
  for (auto kv = obj.begin(); kv != obj.end(); ++kv) keys.push_back(kv.key());
  const std::string mapped = mapped_from.empty() || mapped_from == column
                                 ? ""
                                 : absl::StrCat(" (column_map: ", mapped_from, " -> ", column, ")");
  return absl::InvalidArgumentError(absl::StrCat(
      records.Where(i), ": no column '", column, "'", mapped, "; the record has ",
      keys.empty() ? "no columns" : absl::StrCat("columns ", absl::StrJoin(keys, ", "))));
}

absl::StatusOr<std::string> GetStringColumn(const JsonRecords& records, size_t i,
                                            const std::string& column,
                                            const std::string& mapped_from) {
  CCTUNE_ASSIGN_OR_RETURN(const Json* v, GetColumn(records, i, column, mapped_from));
  if (!v->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(records.Where(i), ": column '", column,
                                                   "' is a JSON ", v->type_name(),
                                                   ", expected a string"));
  }
  return v->get<std::string>();
}

}  // namespace cctune
