#include "tokenizers/test_vectors.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/status.h"
#include "nlohmann/json.hpp"
#include "tests/util/shared_dir.h"

namespace cctune {
namespace testing {

absl::StatusOr<std::string> ReadTestFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

namespace {

std::vector<std::string> FixtureCandidates(const std::string& rel) {
  std::vector<std::string> candidates;
  if (const char* srcdir = std::getenv("TEST_SRCDIR")) {
    candidates.push_back(absl::StrCat(srcdir, "/cctune/", rel));
  }
  if (absl::StatusOr<std::string> root = WorkspaceRoot(); root.ok()) {
    candidates.push_back(absl::StrCat(*root, "/", rel));
  }
  return candidates;
}

}  // namespace

absl::StatusOr<std::string> TokenizerFixturePath(const std::string& file_name) {
  const std::string rel = "tests/assets/tokenizers/" + file_name;
  for (const std::string& c : FixtureCandidates(rel)) {
    if (std::ifstream(c).good()) return c;
  }
  return absl::NotFoundError(absl::StrCat("fixture ", rel));
}

absl::StatusOr<TokenizerFixture> LoadTokenizerFixture(const std::string& file_name) {
  const std::string rel = "tests/assets/tokenizers/" + file_name;
  absl::StatusOr<std::string> text = absl::NotFoundError(absl::StrCat("fixture ", rel));
  for (const std::string& c : FixtureCandidates(rel)) {
    text = ReadTestFile(c);
    if (text.ok()) break;
  }
  if (!text.ok()) return text.status();
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.contains("cases")) {
    return absl::DataLossError(absl::StrCat(rel, " is not a tokenizer fixture"));
  }
  TokenizerFixture fixture;
  for (const auto& c : j["cases"]) {
    EncodeCase e;
    e.text = c["text"].get<std::string>();
    e.ids = c["ids"].get<std::vector<int32_t>>();
    e.parse_special = c.value("parse_special", false);
    e.normalized = c.value("normalized", false);
    fixture.cases.push_back(std::move(e));
  }
  if (j.contains("decode_cases")) {
    for (const auto& c : j["decode_cases"]) {
      fixture.decode_cases.push_back(
          {c["ids"].get<std::vector<int32_t>>(), c["text"].get<std::string>()});
    }
  }
  return fixture;
}

absl::StatusOr<std::vector<ChatCase>> LoadChatCases(const std::string& file_name,
                                                    const std::string& model) {
  CCTUNE_ASSIGN_OR_RETURN(const std::string path, TokenizerFixturePath(file_name));
  CCTUNE_ASSIGN_OR_RETURN(const std::string text, ReadTestFile(path));
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::DataLossError(absl::StrCat(path, " is not a JSON object"));
  }
  const nlohmann::json* list = nullptr;
  if (model.empty()) {
    if (j.contains("chat_cases")) list = &j["chat_cases"];
  } else if (j.contains("models") && j["models"].contains(model)) {
    list = &j["models"][model];
  }
  if (list == nullptr || !list->is_array()) {
    return absl::NotFoundError(absl::StrCat(path, " has no chat cases for '", model, "'"));
  }
  std::vector<ChatCase> out;
  for (const nlohmann::json& c : *list) {
    ChatCase cc;
    for (const nlohmann::json& m : c.at("messages")) {
      cc.messages.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>(),
                             m.at("masked").get<bool>(), m.value("ipython", false)});
    }
    cc.max_seq_len = c.value("max_seq_len", int64_t{0});
    cc.add_end_tokens = c.value("add_end_tokens", true);
    cc.truncate_left = c.value("truncation_type", std::string("right")) == "left";
    cc.ids = c.at("ids").get<std::vector<int32_t>>();
    for (bool b : c.at("mask").get<std::vector<bool>>()) cc.mask.push_back(b ? 1 : 0);
    out.push_back(std::move(cc));
  }
  return out;
}

absl::StatusOr<std::vector<EncodeCase>> LoadSharedVocabVectors(const std::string& dir) {
  CCTUNE_ASSIGN_OR_RETURN(const std::string inp_path, SharedFile(dir + "/vectors.inp"));
  CCTUNE_ASSIGN_OR_RETURN(const std::string out_path, SharedFile(dir + "/vectors.out"));
  CCTUNE_ASSIGN_OR_RETURN(const std::string inp, ReadTestFile(inp_path));
  CCTUNE_ASSIGN_OR_RETURN(const std::string out, ReadTestFile(out_path));
  const std::vector<std::string> inputs = absl::StrSplit(inp, "\n__ggml_vocab_test__\n");
  std::vector<std::string> lines = absl::StrSplit(out, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();  // the final newline
  if (inputs.size() < lines.size()) {
    return absl::DataLossError(absl::StrCat(inp_path, " has ", inputs.size(), " inputs but ",
                                            out_path, " has ", lines.size(), " lines"));
  }
  for (size_t i = lines.size(); i < inputs.size(); ++i) {
    if (!inputs[i].empty()) {
      return absl::DataLossError(absl::StrCat(inp_path, ": input ", i, " has no expected ids"));
    }
  }
  std::vector<EncodeCase> cases;
  for (size_t i = 0; i < lines.size(); ++i) {
    EncodeCase c;
    c.text = inputs[i];
    for (absl::string_view field : absl::StrSplit(lines[i], ' ', absl::SkipEmpty())) {
      int32_t id;
      if (!absl::SimpleAtoi(field, &id)) {
        return absl::DataLossError(absl::StrCat(out_path, ":", i + 1, ": bad id '", field, "'"));
      }
      c.ids.push_back(id);
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

}  // namespace testing
}  // namespace cctune
