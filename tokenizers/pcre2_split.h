// Pre-tokenisation by regex (PCRE2, UTF + UCP, JIT when available): the pieces a
// findall() of the pattern gives, as Python's `regex`, Rust's fancy-regex and Oniguruma do for
// the tiktoken / GPT-2 style patterns. Used by the byte-level BPE tokenizers.
#ifndef CCTUNE_TOKENIZERS_PCRE2_SPLIT_H_
#define CCTUNE_TOKENIZERS_PCRE2_SPLIT_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace cctune {

// PCRE2's \s (with UCP) lacks U+0085, which the regex engines behind tiktoken and Hugging
// Face's tokenizers count as white space: `pattern` with \s, \S spelled out to include it.
std::string AddNextLineToWhitespace(std::string_view pattern);

class Pcre2Splitter {
 public:
  // Compiles `pattern` (after AddNextLineToWhitespace); a bad pattern is InvalidArgument
  // naming `owner` and the offset.
  static absl::StatusOr<std::unique_ptr<Pcre2Splitter>> Compile(std::string_view pattern,
                                                                std::string_view owner);
  ~Pcre2Splitter();
  Pcre2Splitter(const Pcre2Splitter&) = delete;
  Pcre2Splitter& operator=(const Pcre2Splitter&) = delete;

  // Calls fn(start, length) for each match in valid UTF-8 `text`, left to right. Text
  // between matches (none for patterns whose last branch is \s+ ... that cover everything)
  // is passed on too, so no byte is ever dropped. Thread-safe.
  template <typename Fn>
  void ForEach(std::string_view text, Fn&& fn) const {
    size_t pos = 0;
    while (pos < text.size()) {
      size_t start = 0, end = 0;
      if (!Next(text, pos, &start, &end)) {
        fn(pos, text.size() - pos);
        return;
      }
      if (start > pos) fn(pos, start - pos);
      if (end == start) {  // an empty match: step one character on
        end = start + 1;
        while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) ++end;
      }
      fn(start, end - start);
      pos = end;
    }
  }

 private:
  Pcre2Splitter() = default;
  // The next match at or after `pos`: [*start, *end); false when there is none (or the
  // matcher failed, in which case the rest is one piece).
  bool Next(std::string_view text, size_t pos, size_t* start, size_t* end) const;

  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
};

}  // namespace cctune

#endif  // CCTUNE_TOKENIZERS_PCRE2_SPLIT_H_
