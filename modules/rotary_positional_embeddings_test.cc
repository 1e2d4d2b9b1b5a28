#include "modules/rotary_positional_embeddings.h"

#include <numeric>
#include <string>
#include <vector>

#include "core/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "modules/reference.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;

struct Case {
  ops::RopePairing pairing;
  double base;
  std::optional<ops::RopeScaling> scaling;
  int64_t head_dim;
};

class RopeTest : public ::testing::TestWithParam<Case> {};

TEST_P(RopeTest, MatchesFp64ReferenceWithAndWithoutPositions) {
  const Case c = GetParam();
  const int64_t b = 2, s = 5, n = 3, max_len = 64;
  RotaryPositionalEmbeddings rope(c.head_dim, max_len, c.base, c.pairing, c.scaling);
  EXPECT_EQ(rope.NumParameters(), 0);
  Generator gen(c.head_dim);
  Tensor x = ValueOrDie(RandomNormal({b, s, n, c.head_dim}, DType::kF32, gen));
  const auto inv_freq = reference::RopeInvFrequencies(c.head_dim, c.base, c.scaling);

  // Default positions 0..s-1 for every row.
  Tensor out = ValueOrDie(Tensor::Empty(x.shape(), DType::kF32));
  ASSERT_TRUE(rope.Forward(out, x).ok());
  std::vector<int64_t> pos(b * s);
  for (int64_t i = 0; i < b * s; ++i) pos[i] = i % s;
  auto want = reference::Rope(reference::ToVec(x), b, s, n, c.head_dim, pos, inv_freq, c.pairing);
  EXPECT_LE(reference::MaxRelError(reference::ToVec(out), want), 1e-5);

  // Per-row positions, far into the table; in place.
  for (int64_t i = 0; i < b * s; ++i) pos[i] = 50 - 7 * (i / s) + (i % s);
  Tensor input_pos = ValueOrDie(Tensor::FromVector(pos, {b, s}));
  want = reference::Rope(reference::ToVec(x), b, s, n, c.head_dim, pos, inv_freq, c.pairing);
  ASSERT_TRUE(rope.Forward(x, x, &input_pos).ok());
  EXPECT_LE(reference::MaxRelError(reference::ToVec(x), want), 1e-5);
}

ops::RopeScaling Llama31() { return ops::RopeScaling{}; }
ops::RopeScaling Llama32() {
  ops::RopeScaling s;
  s.factor = 32.0;
  return s;
}

INSTANTIATE_TEST_SUITE_P(
    Flavours, RopeTest,
    ::testing::Values(Case{ops::RopePairing::kInterleaved, 10000.0, std::nullopt, 8},
                      Case{ops::RopePairing::kHalfSplit, 1e6, std::nullopt, 16},
                      Case{ops::RopePairing::kInterleaved, 500000.0, Llama31(), 128},
                      Case{ops::RopePairing::kInterleaved, 500000.0, Llama32(), 64},
                      Case{ops::RopePairing::kHalfSplit, 10000.0, std::nullopt, 2}));

TEST(RopeTest, ScalingChangesLowFrequenciesOnly) {
  const auto plain = reference::RopeInvFrequencies(128, 500000.0);
  const auto scaled = reference::RopeInvFrequencies(128, 500000.0, Llama31());
  EXPECT_EQ(scaled.front(), plain.front());
  EXPECT_NEAR(scaled.back(), plain.back() / 8.0, 1e-15);
  RotaryPositionalEmbeddings a(128, 16, 500000.0),
      b(128, 16, 500000.0, ops::RopePairing::kInterleaved, Llama31());
  ASSERT_TRUE(a.Setup(Device::Cpu()).ok());
  ASSERT_TRUE(b.Setup(Device::Cpu()).ok());
  EXPECT_NE(reference::ToVec(a.cos()), reference::ToVec(b.cos()));
}

TEST(RopeTest, TablesAreBuiltOnceAndNotOnMeta) {
  RotaryPositionalEmbeddings rope(8, 32);
  ASSERT_TRUE(rope.Setup(Device::Meta()).ok());
  EXPECT_FALSE(rope.cos().defined());
  ASSERT_TRUE(rope.Setup(Device::Cpu()).ok());
  EXPECT_EQ(rope.cos().shape(), (Shape{32, 4}));
  const void* table = rope.cos().raw_data();
  Generator gen(1);
  Tensor x = ValueOrDie(RandomNormal({1, 3, 2, 8}, DType::kF32, gen));
  ASSERT_TRUE(rope.Forward(x, x).ok());
  ASSERT_TRUE(rope.Setup(Device::Cpu()).ok());
  EXPECT_EQ(rope.cos().raw_data(), table);
}

TEST(RopeTest, RejectsPositionsPastTheTableAndBadShapes) {
  RotaryPositionalEmbeddings rope(4, 8);
  Generator gen(2);
  Tensor x = ValueOrDie(RandomNormal({1, 2, 1, 4}, DType::kF32, gen));
  Tensor pos = ValueOrDie(Tensor::FromVector(std::vector<int64_t>{7, 8}, {1, 2}));
  absl::Status s = rope.Forward(x, x, &pos);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("8"));
  Tensor long_x = ValueOrDie(RandomNormal({1, 9, 1, 4}, DType::kF32, gen));
  s = rope.Forward(long_x, long_x);
  EXPECT_THAT(std::string(s.message()), HasSubstr("seq_len (9) exceeds max_seq_len (8)"));
  Tensor wrong = ValueOrDie(RandomNormal({1, 2, 6}, DType::kF32, gen));
  EXPECT_FALSE(rope.Forward(wrong, wrong).ok());
}

}  // namespace
}  // namespace cctune
