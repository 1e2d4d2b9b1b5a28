#include "tokenizers/nfc.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>
#include <unicode/uchar.h>

#include <string>
#include <vector>

#include "core/random.h"
#include "gtest/gtest.h"
#include "tokenizers/utf8.h"

namespace cctune {
namespace {

std::string IcuNfc(const std::string& text) {
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(err);
  EXPECT_TRUE(U_SUCCESS(err));
  std::string out;
  icu::StringByteSink<std::string> sink(&out);
  nfc->normalizeUTF8(0, icu::StringPiece(text.data(), static_cast<int32_t>(text.size())), sink,
                     nullptr, err);
  EXPECT_TRUE(U_SUCCESS(err));
  return out;
}

std::string Utf8(uint32_t cp) {
  std::string s;
  AppendUtf8(cp, &s);
  return s;
}

// Code points both sides know: assigned in our tables' Unicode version (ICU's is newer).
bool KnownToBoth(uint32_t cp) {
  if (cp >= 0xD800 && cp <= 0xDFFF) return false;
  UVersionInfo age;
  u_charAge(static_cast<UChar32>(cp), age);
  if (age[0] == 0 && age[1] == 0) return false;  // unassigned
  const int ours_major = std::stoi(NfcUnicodeVersion());
  return age[0] <= ours_major;
}

TEST(NfcTest, KnownExamples) {
  EXPECT_EQ(NormalizeNfc("Cafe\xCC\x81"), "Caf\xC3\xA9");
  EXPECT_EQ(NormalizeNfc("plain ascii"), "plain ascii");
  EXPECT_EQ(NormalizeNfc("\xEF\xAC\x81"), "\xEF\xAC\x81");  // a ligature stays (NFC, not NFKC)
  EXPECT_EQ(NormalizeNfc("\xE2\x84\xA6"), "\xCE\xA9");      // OHM SIGN -> OMEGA (singleton)
  // Hangul: conjoining jamo compose into a syllable.
  EXPECT_EQ(NormalizeNfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"), "\xEA\xB0\x81");
  // Marks reorder by combining class: q + dot below (220) + acute (230) either way.
  EXPECT_EQ(NormalizeNfc("q\xCC\x81\xCC\xA3"), NormalizeNfc("q\xCC\xA3\xCC\x81"));
  EXPECT_EQ(NormalizeNfc("a\xFF" "b"), "a\xFF" "b");  // invalid bytes pass through
}

TEST(NfcTest, EveryCodePointAloneAndWithMarksMatchesIcu) {
  int checked = 0;
  for (uint32_t cp = 0; cp < 0x110000; ++cp) {
    if (!KnownToBoth(cp)) continue;
    for (const char* tail : {"", "\xCC\x81", "\xCC\xA3\xCC\x81", "\xE1\x85\xA1"}) {
      const std::string s = Utf8(cp) + tail;
      ASSERT_EQ(NormalizeNfc(s), IcuNfc(s)) << "U+" << std::hex << cp << " + tail";
    }
    ++checked;
  }
  EXPECT_GT(checked, 140000);
}

TEST(NfcTest, RandomMixesOfDecomposableTextMatchIcu) {
  // Letters, precomposed letters, combining marks of several classes, Hangul syllables and
  // jamo, and singletons, in random order.
  std::vector<uint32_t> pool = {'a', 'e', 'o', 'A', 'n', ' ', 0xE9, 0xC5, 0x1E0B, 0x1E63,
                                0x0301, 0x0300, 0x0323, 0x0308, 0x0327, 0x05B0, 0x0591, 0x093C,
                                0x0F71, 0x0F72, 0x1100, 0x1161, 0x11A8, 0xAC00, 0xAC01, 0x2126,
                                0x212B, 0x0344, 0x0F73, 0x1D15E, 0x3099, 0x304B, 0x30AB, 0x0CCB};
  Generator rng(11);
  for (int i = 0; i < 20000; ++i) {
    std::string s;
    const int n = 1 + static_cast<int>(rng.UniformInt(12));
    for (int k = 0; k < n; ++k) s += Utf8(pool[rng.UniformInt(pool.size())]);
    ASSERT_EQ(NormalizeNfc(s), IcuNfc(s)) << s;
  }
}

}  // namespace
}  // namespace cctune
