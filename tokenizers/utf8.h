// UTF-8 helpers shared by the tokenizers: validation, Python-compatible repair of invalid byte
// sequences (bytes.decode("utf-8", errors="replace")), and a buffer that turns a stream of
// token pieces, which may split a character across tokens, into printable UTF-8.
#ifndef CCTUNE_TOKENIZERS_UTF8_H_
#define CCTUNE_TOKENIZERS_UTF8_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace cctune {

// Length of the well-formed UTF-8 sequence starting at s[0] (1..4), or 0 when s does not start
// with one (bad lead byte, bad continuation, overlong form, surrogate, > U+10FFFF, truncated).
size_t Utf8SequenceLength(std::string_view s);

// True when the whole string is well-formed UTF-8.
bool IsValidUtf8(std::string_view s);

// Replaces each maximal invalid subpart with U+FFFD, exactly as Python's
// bytes.decode("utf-8", errors="replace") does (Unicode's "substitution of maximal subparts").
std::string ReplaceInvalidUtf8(std::string_view s);

// Appends the UTF-8 encoding of code point cp (< 0x110000) to *out.
void AppendUtf8(uint32_t cp, std::string* out);

// Appends ReplaceInvalidUtf8(s) to *out.
void AppendReplacingInvalidUtf8(std::string_view s, std::string* out);

// Streaming output: Push() the raw bytes of each decoded token piece and print what it
// returns. A character split across pieces is held back until complete; invalid bytes come out
// as U+FFFD. Flush() returns whatever is still held (an incomplete tail becomes U+FFFD).
class Utf8StreamBuffer {
 public:
  std::string Push(std::string_view bytes);
  std::string Flush();

 private:
  std::string pending_;
};

}  // namespace cctune

#endif  // CCTUNE_TOKENIZERS_UTF8_H_
