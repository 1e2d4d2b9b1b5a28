#include "tokenizers/pcre2_split.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace cctune {

std::string AddNextLineToWhitespace(std::string_view pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      if (e == 's') {
        out += in_class ? "\\s\\x{85}" : "[\\s\\x{85}]";
      } else if (e == 'S' && !in_class) {
        out += "[^\\s\\x{85}]";
      } else {
        out += c;
        out += e;
      }
      ++i;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

namespace {

// Per-thread match data and a JIT stack that grows on demand.
struct SplitThreadState {
  pcre2_match_data* match_data;
  pcre2_match_context* context;
  pcre2_jit_stack* stack;
  SplitThreadState() {
    match_data = pcre2_match_data_create(2, nullptr);
    context = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(64 << 10, 64 << 20, nullptr);
    CCTUNE_CHECK(match_data != nullptr && context != nullptr && stack != nullptr,
                 "PCRE2 allocation failed");
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~SplitThreadState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(match_data);
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<Pcre2Splitter>> Pcre2Splitter::Compile(std::string_view pattern,
                                                                      std::string_view owner) {
  const std::string spelled = AddNextLineToWhitespace(pattern);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(spelled.data()), spelled.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    return absl::InvalidArgumentError(
        absl::StrCat(absl::string_view(owner.data(), owner.size()), ": bad pattern at offset ",
                     error_offset, ": ", reinterpret_cast<const char*>(message)));
  }
  std::unique_ptr<Pcre2Splitter> s(new Pcre2Splitter());
  s->code_ = code;
  s->jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return s;
}

Pcre2Splitter::~Pcre2Splitter() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

Pcre2Splitter::Match Pcre2Splitter::Next(std::string_view text, size_t pos, size_t* start,
                                          size_t* end) const {
  thread_local SplitThreadState state;
  auto* code = static_cast<const pcre2_code*>(code_);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  int rc = PCRE2_ERROR_NOMATCH;
  if (jit_) {
    rc = pcre2_jit_match(code, subject, text.size(), pos, 0, state.match_data, state.context);
  }
  if (!jit_ || (rc < 0 && rc != PCRE2_ERROR_NOMATCH)) {
    // No JIT, or it ran out of stack: the interpreter (heap frames) decides.
    rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, state.match_data,
                     state.context);
  }
  if (rc == PCRE2_ERROR_NOMATCH) return Match::kNone;
  if (rc < 0) return Match::kError;
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.match_data);
  *start = ovector[0];
  *end = ovector[1];
  return Match::kFound;
}

}  // namespace cctune
