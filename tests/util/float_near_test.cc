#include "tests/util/float_near.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace cctune::testing {
namespace {

TEST(FloatUlpTest, IsTheFloatSpacing) {
  EXPECT_EQ(FloatUlp(1.0), std::ldexp(1.0, -23));
  EXPECT_EQ(FloatUlp(1.6), std::ldexp(1.0, -23));
  EXPECT_EQ(FloatUlp(-1.6), std::ldexp(1.0, -23));
  EXPECT_EQ(FloatUlp(0.7), std::ldexp(1.0, -24));
  EXPECT_EQ(FloatUlp(2.0), std::ldexp(1.0, -22));
  EXPECT_EQ(FloatUlp(0.0), std::ldexp(1.0, -149));
  const float f = 1.6f;
  EXPECT_EQ(FloatUlp(f), std::nextafter(f, 2.f) - f);
}

TEST(FloatNearTest, UlpsScaleWithTheMagnitude) {
  const float p = 1.6f, next = std::nextafter(p, 2.f), next2 = std::nextafter(next, 2.f);
  // The train_step case: 1e-7 absolute is below one ULP at 1.6.
  EXPECT_GT(next - p, 1.1e-7);
  EXPECT_TRUE(FloatNear(next, p, 0, 1));
  EXPECT_FALSE(FloatNear(next2, p, 0, 1));
  EXPECT_TRUE(FloatNear(next2, p, 0, 2));
  EXPECT_FALSE(FloatNear(p * (1 + 1e-5), p, 1e-6, 4));
  EXPECT_TRUE(FloatNear(p * (1 + 1e-6), p, 2e-6));
  EXPECT_TRUE(FloatNear(1e-30, 0.0, 0, 0, 1e-20));
  EXPECT_FALSE(FloatNear(1e-10, 0.0, 1e-3, 4));
}

TEST(FloatNearTest, NanNeverMatchesInfinitiesOnlyThemselves) {
  const double nan = std::numeric_limits<double>::quiet_NaN(),
               inf = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(FloatNear(nan, nan, 1, 1));
  EXPECT_FALSE(FloatNear(1.0, nan, 1, 1));
  EXPECT_TRUE(FloatNear(inf, inf, 0));
  EXPECT_FALSE(FloatNear(inf, -inf, 1, 1));
  EXPECT_FALSE(FloatNear(inf, 1e30, 1e-3, 4));
}

TEST(FloatNearTest, MessageGivesTheDifferenceInUlps) {
  const float p = 1.6f;
  const ::testing::AssertionResult r = FloatNear(std::nextafter(std::nextafter(p, 2.f), 2.f), p, 0, 1);
  ASSERT_FALSE(r);
  EXPECT_NE(std::string(r.message()).find("= 2 ULP"), std::string::npos) << r.message();
}

}  // namespace
}  // namespace cctune::testing
