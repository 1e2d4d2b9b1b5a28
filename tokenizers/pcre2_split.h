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

  enum class Match { kFound, kNone, kError };
  // The next match at or after `pos` in valid UTF-8 `text`: [*start, *end). kError: a PCRE2
  // resource limit on pathological input.
  Match Next(std::string_view text, size_t pos, size_t* start, size_t* end) const;

  // Calls fn(start, length) for each piece of valid UTF-8 `text`, left to right: the matches,
  // and (as Hugging Face's isolated Split keeps them) any text between or after them, so no
  // byte is dropped. Where the matcher fails, the next character goes alone. Thread-safe.
  template <typename Fn>
  void ForEach(std::string_view text, Fn&& fn) const {
    size_t pos = 0;
    while (pos < text.size()) {
      size_t start = 0, end = 0;
      const Match m = Next(text, pos, &start, &end);
      if (m == Match::kNone) {
        fn(pos, text.size() - pos);
        return;
      }
      if (m == Match::kError || end == start) {  // one character alone
        start = pos;
        end = pos + 1;
        while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) ++end;
      }
      if (start > pos) fn(pos, start - pos);
      fn(start, end - start);
      pos = end;
    }
  }

 private:
  Pcre2Splitter() = default;

  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
};

}  // namespace cctune

#endif  // CCTUNE_TOKENIZERS_PCRE2_SPLIT_H_
