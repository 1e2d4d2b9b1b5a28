#include "tokenizers/utf8.h"

#include <string>

#include "core/random.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(Utf8Test, ValidSequences) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii text that is longer than eight bytes"));
  EXPECT_TRUE(IsValidUtf8("\xC3\xA9\xE4\xB8\xAD\xF0\x9F\xA6\x99\xF4\x8F\xBF\xBF"));
  EXPECT_FALSE(IsValidUtf8("\xC0\x80"));          // overlong
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));  // > U+10FFFF
  EXPECT_FALSE(IsValidUtf8("abcdefgh\xE4\xB8"));  // truncated after the fast path
  EXPECT_EQ(Utf8SequenceLength("\xF0\x9F\xA6\x99"), 4u);
  EXPECT_EQ(Utf8SequenceLength("\xF0\x9F\xA6"), 0u);
}

// Expected values are Python's bytes.decode("utf-8", errors="replace").
TEST(Utf8Test, ReplacementMatchesPython) {
  EXPECT_EQ(ReplaceInvalidUtf8("a\xFF" "b"), "a" + kFffd + "b");
  EXPECT_EQ(ReplaceInvalidUtf8("\xE2\x82" "A"), kFffd + "A");          // one per maximal subpart
  EXPECT_EQ(ReplaceInvalidUtf8("\xE0\x80\x80"), kFffd + kFffd + kFffd);  // E0 needs A0..BF
  EXPECT_EQ(ReplaceInvalidUtf8("\xED\xA0\x80"), kFffd + kFffd + kFffd);
  EXPECT_EQ(ReplaceInvalidUtf8("\xF0\x9F\xA6"), kFffd);
  EXPECT_EQ(ReplaceInvalidUtf8("\xF0\x9F\xA6\xF0\x9F\xA6\x99"), kFffd + "\xF0\x9F\xA6\x99");
  EXPECT_EQ(ReplaceInvalidUtf8("\x80\x80"), kFffd + kFffd);
  EXPECT_EQ(ReplaceInvalidUtf8("\xC3"), kFffd);
  EXPECT_EQ(ReplaceInvalidUtf8("\xF5\x80"), kFffd + kFffd);
}

TEST(Utf8Test, StreamBufferHoldsSplitCharacters) {
  Utf8StreamBuffer s;
  EXPECT_EQ(s.Push("a\xF0\x9F"), "a");
  EXPECT_EQ(s.Push("\xA6"), "");
  EXPECT_EQ(s.Push("\x99!"), "\xF0\x9F\xA6\x99!");
  EXPECT_EQ(s.Push("\xFF"), kFffd);
  EXPECT_EQ(s.Push("\xE4"), "");
  EXPECT_EQ(s.Flush(), kFffd);
}

TEST(Utf8Test, StreamingEqualsWholeOnRandomBytes) {
  Generator gen(42);
  const uint8_t kBytes[] = {'a', ' ', 0x80, 0xA0, 0xBF, 0xC3, 0xE0, 0xE4, 0xED,
                            0xF0, 0xF4, 0x9F, 0xA6, 0x99, 0xFF, 0x8F, 0xB8};
  for (int trial = 0; trial < 2000; ++trial) {
    std::string bytes;
    const size_t n = gen.UniformInt(24);
    for (size_t i = 0; i < n; ++i) bytes += static_cast<char>(kBytes[gen.UniformInt(sizeof(kBytes))]);
    const std::string whole = ReplaceInvalidUtf8(bytes);
    ASSERT_TRUE(IsValidUtf8(whole));
    Utf8StreamBuffer s;
    std::string streamed;
    size_t pos = 0;
    while (pos < bytes.size()) {
      const size_t k = 1 + gen.UniformInt(4);
      streamed += s.Push(bytes.substr(pos, k));
      pos += k;
    }
    streamed += s.Flush();
    ASSERT_EQ(streamed, whole) << trial;
  }
}

}  // namespace
}  // namespace cctune
