#include "core/random.h"

#include <cmath>

#include "gtest/gtest.h"

namespace cctune {
namespace {

// Known-answer vectors from the Random123 distribution (kat_vectors, philox4x32_10).
TEST(PhiloxTest, KnownAnswers) {
  auto r = Philox4x32({0, 0, 0, 0}, {0, 0});
  EXPECT_EQ(r[0], 0x6627e8d5u);
  EXPECT_EQ(r[1], 0xe169c58du);
  EXPECT_EQ(r[2], 0xbc57ac4cu);
  EXPECT_EQ(r[3], 0x9b00dbd8u);
  r = Philox4x32({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu});
  EXPECT_EQ(r[0], 0x408f276du);
  EXPECT_EQ(r[1], 0x41c83b0eu);
  EXPECT_EQ(r[2], 0xa20bc7c6u);
  EXPECT_EQ(r[3], 0x6d5451fdu);
}

TEST(GeneratorTest, SameSeedSameNumbersAndStateRestores) {
  Generator a(42), b(42), c(43);
  std::vector<uint32_t> va, vb, vc;
  for (int i = 0; i < 100; ++i) {
    va.push_back(a.NextUint32());
    vb.push_back(b.NextUint32());
    vc.push_back(c.NextUint32());
  }
  EXPECT_EQ(va, vb);
  EXPECT_NE(va, vc);
  Generator d(0);
  d.SetState(42, 37);
  EXPECT_EQ(d.NextUint32(), va[37]);
}

TEST(GeneratorTest, NormalHasUnitMoments) {
  Generator g(7);
  const int n = 200000;
  double s = 0, s2 = 0;
  for (int i = 0; i < n; ++i) {
    const double x = g.Normal();
    s += x;
    s2 += x * x;
  }
  const double mean = s / n, var = s2 / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(var, 1.0, 0.02);
}

TEST(GeneratorTest, UniformIntCoversRangeEvenly) {
  Generator g(3);
  std::vector<int> counts(7, 0);
  for (int i = 0; i < 70000; ++i) counts[g.UniformInt(7)]++;
  for (int c : counts) EXPECT_NEAR(c, 10000, 500);
}

TEST(GeneratorTest, FillNormalIsDeterministicAcrossDtypes) {
  Generator g1(5), g2(5);
  auto a = *RandomNormal({3, 5}, DType::kF32, g1);
  auto b = *RandomNormal({3, 5}, DType::kBF16, g2);
  auto va = *a.ToFloatVector(), vb = *b.ToFloatVector();
  for (int i = 0; i < 15; ++i) EXPECT_NEAR(va[i], vb[i], std::fabs(va[i]) * 1e-2 + 1e-6);
  Tensor ints = *Tensor::Empty({2}, DType::kI32);
  EXPECT_FALSE(FillNormal(ints, 0, 1, g1).ok());
}

}  // namespace
}  // namespace cctune
