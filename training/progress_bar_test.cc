#include "training/progress_bar.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string ReadBack(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) s.append(buf, n);
  return s;
}

// Number of UTF-8 code points (the bar's cells are multi-byte block characters).
size_t CodePoints(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

TEST(ProgressBarTest, FormatDuration) {
  EXPECT_EQ(FormatDuration(0), "00:00");
  EXPECT_EQ(FormatDuration(59.9), "00:59");
  EXPECT_EQ(FormatDuration(307), "05:07");
  EXPECT_EQ(FormatDuration(3723), "1:02:03");
  EXPECT_EQ(FormatDuration(-1), "??:??");
  EXPECT_EQ(FormatDuration(NAN), "??:??");
}

TEST(ProgressBarTest, RenderShowsPercentBarCountTimesAndEta) {
  // 37 of 100 in 12 s at 37/12 it/s: 63 left take 20.4 s.
  const std::string line = RenderProgress("train", 37, 100, 12.0, 37 / 12.0, "loss=2.310", 20);
  EXPECT_THAT(line, StartsWith("train:  37%|"));
  EXPECT_THAT(line, HasSubstr("| 37/100 [00:12<00:20, 3.08it/s] loss=2.310"));
  // The bar is exactly 20 cells between the pipes: 7.4 cells -> 7 full + a 3/8 block + 12 blanks.
  const size_t a = line.find('|'), b = line.find('|', a + 1);
  const std::string bar = line.substr(a + 1, b - a - 1);
  EXPECT_EQ(CodePoints(bar), 20u);
  EXPECT_EQ(bar.substr(0, 21), "███████");
  EXPECT_EQ(bar.substr(21, 3), "\u258D");
}

TEST(ProgressBarTest, RenderEdgeCases) {
  EXPECT_THAT(RenderProgress("", 0, 10, 0.0, 0.0, ""), StartsWith("  0%|"));
  EXPECT_THAT(RenderProgress("", 0, 10, 0.0, 0.0, ""), HasSubstr("[00:00<??:??, ?it/s]"));
  const std::string full = RenderProgress("x", 10, 10, 5.0, 2.0, "");
  EXPECT_THAT(full, HasSubstr("100%|"));
  EXPECT_THAT(full, HasSubstr("10/10 [00:05<00:00, 2.00it/s]"));
  // Slow steps show seconds per item.
  EXPECT_THAT(RenderProgress("x", 1, 10, 4.0, 0.25, ""), HasSubstr("4.00s/it"));
  // Unknown total: a counter, no bar.
  EXPECT_EQ(RenderProgress("x", 5, 0, 2.0, 2.5, ""), "x: 5 [00:02, 2.50it/s]");
  // Past the total clamps the bar at 100%.
  EXPECT_THAT(RenderProgress("x", 12, 10, 1.0, 12.0, ""), HasSubstr("100%|"));
}

TEST(ProgressBarTest, DisabledWhenNotATerminal) {
  std::FILE* f = std::tmpfile();  // a regular file is not a TTY
  {
    ProgressBar bar("train", 10, f);
    EXPECT_FALSE(bar.enabled());
    for (int i = 1; i <= 10; ++i) bar.Update(i, "loss=1");
  }
  EXPECT_EQ(ReadBack(f), "");
  std::fclose(f);
}

TEST(ProgressBarTest, ForcedBarRedrawsWithCarriageReturnAndEndsTheLine) {
  std::FILE* f = std::tmpfile();
  {
    ProgressBar bar("train", 3, f, /*force=*/true);
    ASSERT_TRUE(bar.enabled());
    bar.Update(1, "loss=3.000");
    bar.Update(3, "loss=1.000");  // the last step is always drawn
  }
  const std::string out = ReadBack(f);
  EXPECT_THAT(out, StartsWith("\rtrain:  33%|"));
  EXPECT_THAT(out, HasSubstr("\rtrain: 100%|"));
  EXPECT_THAT(out, HasSubstr("3/3 ["));
  EXPECT_THAT(out, HasSubstr("loss=1.000"));
  EXPECT_EQ(out.back(), '\n');
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1);
  std::fclose(f);
}

}  // namespace
}  // namespace cctune
