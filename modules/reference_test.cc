// Sanity checks of the fp64 references on hand-computed cases, so that the module tests that
// rely on them compare against something known to be right.
#include "modules/reference.h"

#include <cmath>

#include "gtest/gtest.h"

namespace cctune {
namespace reference {
namespace {

TEST(ReferenceTest, LinearAndRmsNorm) {
  // [1, 2] · [[1, 0], [2, -1], [0.5, 0.5]]ᵀ + [0, 1, 0]
  EXPECT_EQ(Linear({1, 2}, 1, 2, {1, 0, 2, -1, 0.5, 0.5}, 3, {0, 1, 0}), (Vec{1, 1, 1.5}));
  const Vec y = RmsNorm({3, 4}, 1, 2, {1, 2}, 0.0);  // rms = sqrt(12.5)
  EXPECT_NEAR(y[0], 3 / std::sqrt(12.5), 1e-15);
  EXPECT_NEAR(y[1], 8 / std::sqrt(12.5), 1e-15);
  EXPECT_NEAR(SiluMul({0.0, 1.0}, {5.0, 2.0})[1], 2.0 / (1 + std::exp(-1.0)), 1e-15);
}

TEST(ReferenceTest, CrossEntropySkipsIgnoredLabels) {
  // Row 0: uniform over 4 (log 4); row 1 ignored; row 2: logits (0, ln 3, 0, 0), label 1:
  // -log(3 / 6) = log 2.
  const Vec logits = {1, 1, 1, 1, 9, -9, 9, -9, 0, std::log(3.0), 0, 0};
  EXPECT_NEAR(CrossEntropy(logits, 3, 4, {2, -100, 1}, -100), (std::log(4.0) + std::log(2.0)) / 2,
              1e-15);
  EXPECT_EQ(CrossEntropy(logits, 3, 4, {-100, -100, -100}, -100), 0.0);
}

TEST(ReferenceTest, RopeRotatesPairs) {
  const Vec f = RopeInvFrequencies(4, 100.0);  // 1, 1/10
  EXPECT_NEAR(f[1], 0.1, 1e-15);
  // Position 1, interleaved pairs (x0, x1) and (x2, x3).
  Vec y = Rope({1, 0, 0, 1}, 1, 1, 1, 4, {1}, f, ops::RopePairing::kInterleaved);
  EXPECT_NEAR(y[0], std::cos(1.0), 1e-15);
  EXPECT_NEAR(y[1], std::sin(1.0), 1e-15);
  EXPECT_NEAR(y[2], -std::sin(0.1), 1e-15);
  EXPECT_NEAR(y[3], std::cos(0.1), 1e-15);
  // Half split pairs (x0, x2) and (x1, x3).
  y = Rope({1, 0, 0, 1}, 1, 1, 1, 4, {1}, f, ops::RopePairing::kHalfSplit);
  EXPECT_NEAR(y[0], std::cos(1.0), 1e-15);
  EXPECT_NEAR(y[2], std::sin(1.0), 1e-15);
  EXPECT_NEAR(y[1], -std::sin(0.1), 1e-15);
  EXPECT_NEAR(y[3], std::cos(0.1), 1e-15);
}

TEST(ReferenceTest, Llama31ScalingRegions) {
  ops::RopeScaling s;  // factor 8, low 1, high 4, original 8192
  const Vec plain = RopeInvFrequencies(128, 500000.0);
  const Vec scaled = RopeInvFrequencies(128, 500000.0, s);
  const double pi = 3.14159265358979323846;
  for (size_t i = 0; i < plain.size(); ++i) {
    const double wavelen = 2 * pi / plain[i];
    if (wavelen < 2048) {
      EXPECT_EQ(scaled[i], plain[i]);
    }
    if (wavelen > 8192) {
      EXPECT_NEAR(scaled[i], plain[i] / 8, 1e-18);
    }
    if (wavelen >= 2048 && wavelen <= 8192) {
      EXPECT_LE(scaled[i], plain[i]);
      EXPECT_GE(scaled[i], plain[i] / 8);
    }
  }
}

TEST(ReferenceTest, AttentionGroupsHeadsAndMasks) {
  // b=1, s_q=1, s_kv=2, n_h=2, n_kv=1, h_d=1: both heads read the single kv head.
  const Vec q = {0.0, 2.0}, k = {1.0, 3.0}, v = {10.0, 20.0};
  Vec out = Attention(q, k, v, 1, 1, 2, 2, 1, 1, {}, /*causal=*/false);
  EXPECT_NEAR(out[0], 15.0, 1e-12);  // q=0: uniform
  const double p1 = std::exp(2 * 3.0) / (std::exp(2 * 1.0) + std::exp(2 * 3.0));
  EXPECT_NEAR(out[1], 10 * (1 - p1) + 20 * p1, 1e-12);
  // Causal with s_q = s_kv = 2 on one head: row 0 sees only key 0.
  out = Attention({1.0, 1.0}, {1.0, 5.0}, {3.0, 7.0}, 1, 2, 2, 1, 1, 1, {}, true);
  EXPECT_EQ(out[0], 3.0);
  // A row that may attend nothing is zero.
  out = Attention({1.0}, {1.0}, {3.0}, 1, 1, 1, 1, 1, 1, {false}, false);
  EXPECT_EQ(out[0], 0.0);
  EXPECT_EQ(MaxRelError({1.0, 2.0}, {1.0, 2.5}), 0.2);
}

}  // namespace
}  // namespace reference
}  // namespace cctune
