#include "distributed/local_reduce.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;

// The 16-bit value nearest to x (ties to the even pattern), found among the neighbours of a
// first guess: independent of the code under test's rounding path.
template <typename T>
T Nearest(double x, float (*to_float)(T), T (*from_float)(float)) {
  T guess = from_float(static_cast<float>(x));
  T best = guess;
  double best_err = std::fabs(static_cast<double>(to_float(guess)) - x);
  for (int d : {-1, 1}) {
    T c;
    c.bits = static_cast<uint16_t>(guess.bits + d);
    const double v = to_float(c);
    if (!std::isfinite(v) || std::signbit(v) != std::signbit(to_float(guess))) continue;
    const double err = std::fabs(v - x);
    if (err < best_err || (err == best_err && (c.bits & 1) == 0)) {
      best = c;
      best_err = err;
    }
  }
  return best;
}

TEST(LocalReduceTest, Bf16AndF16SumsAreCorrectlyRoundedExactSums) {
  Generator gen(7);
  constexpr int kRanks = 5;
  constexpr int64_t kN = 3000;
  std::vector<bf16> b(kRanks * kN), bout(kN);
  std::vector<f16> h(kRanks * kN), hout(kN);
  for (int64_t i = 0; i < kRanks * kN; ++i) {
    // Values over a wide range of exponents, so that exact sums need more than float's 24
    // bits and rounding through float first (twice) would show.
    const double v = gen.Normal();
    b[i] = FloatToBf16(static_cast<float>(std::ldexp(v, static_cast<int>((i * 7) % 41) - 20)));
    h[i] = FloatToF16(static_cast<float>(std::ldexp(v, static_cast<int>((i * 5) % 25) - 12)));
  }
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
    ReduceBlocks(b.data(), kRanks, kN, kN, DType::kBF16, op, bout.data());
    ReduceBlocks(h.data(), kRanks, kN, kN, DType::kF16, op, hout.data());
    for (int64_t i = 0; i < kN; ++i) {
      long double bs = 0, hs = 0;  // exact: 5 terms of 8/11-bit mantissas within 2^64
      for (int r = 0; r < kRanks; ++r) {
        bs += Bf16ToFloat(b[r * kN + i]);
        hs += F16ToFloat(h[r * kN + i]);
      }
      if (op == ReduceOp::kAvg) {
        bs /= kRanks;
        hs /= kRanks;
      }
      ASSERT_EQ(bout[i].bits, Nearest<bf16>(static_cast<double>(bs), Bf16ToFloat, FloatToBf16).bits)
          << ReduceOpName(op) << " bf16 @" << i << " exact " << bs;
      ASSERT_EQ(hout[i].bits, Nearest<f16>(static_cast<double>(hs), F16ToFloat, FloatToF16).bits)
          << ReduceOpName(op) << " f16 @" << i << " exact " << hs;
    }
  }
}

TEST(LocalReduceTest, Bf16SumIsNotRoundedTwice) {
  // 1 + 2^-8 + 2^-30: through float it is 1 + 2^-8, a tie that rounds to 1 in bf16; the exact
  // sum is above the tie: 1 + 2^-7.
  std::vector<bf16> blocks = {FloatToBf16(1.0f), FloatToBf16(std::ldexp(1.0f, -8)),
                              FloatToBf16(std::ldexp(1.0f, -30))};
  bf16 out;
  ReduceBlocks(blocks.data(), 3, 1, 1, DType::kBF16, ReduceOp::kSum, &out);
  EXPECT_EQ(Bf16ToFloat(out), 1.0f + std::ldexp(1.0f, -7));
}

TEST(LocalReduceTest, F32SumInRankOrderRoundsOnce) {
  // 1 + 2^-24 + 2^-24: f32 addition left to right gives 1; the exact sum rounds to 1 + 2^-23.
  const float e = std::ldexp(1.0f, -24);
  std::vector<float> blocks = {1.0f, e, e};
  float out = 0;
  ReduceBlocks(blocks.data(), 3, 1, 1, DType::kF32, ReduceOp::kSum, &out);
  EXPECT_EQ(out, 1.0f + 2 * e);
}

TEST(LocalReduceTest, MaxPropagatesNaNAndIntegersWrap) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> f = {1, nan, 5, 2, 3, 7};  // 3 ranks x 2 elements
  std::vector<float> fout(2);
  ReduceBlocks(f.data(), 3, 2, 2, DType::kF32, ReduceOp::kMax, fout.data());
  EXPECT_EQ(fout[0], 5.0f);
  EXPECT_TRUE(std::isnan(fout[1]));
  std::vector<int32_t> i = {INT32_MAX, -3, 1, 9};  // 2 ranks x 2
  std::vector<int32_t> sum(2), max(2);
  ReduceBlocks(i.data(), 2, 2, 2, DType::kI32, ReduceOp::kSum, sum.data());
  ReduceBlocks(i.data(), 2, 2, 2, DType::kI32, ReduceOp::kMax, max.data());
  EXPECT_EQ(sum[0], INT32_MIN);
  EXPECT_EQ(sum[1], 6);
  EXPECT_EQ(max[0], INT32_MAX);
  EXPECT_EQ(max[1], 9);
  std::vector<int64_t> l = {INT64_MAX, 1};
  int64_t lsum = 0;
  ReduceBlocks(l.data(), 2, 1, 1, DType::kI64, ReduceOp::kSum, &lsum);
  EXPECT_EQ(lsum, INT64_MIN);
}

TEST(LocalReduceTest, OutputMayBeABlock) {
  std::vector<float> f = {1, 2, 10, 20};
  ReduceBlocks(f.data(), 2, 2, 2, DType::kF32, ReduceOp::kSum, f.data() + 2);
  EXPECT_EQ(f[2], 11.0f);
  EXPECT_EQ(f[3], 22.0f);
}

TEST(LocalReduceTest, ValidateNamesTheOpAndDType) {
  EXPECT_TRUE(ValidateReduce("all_reduce", DType::kBF16, ReduceOp::kAvg).ok());
  EXPECT_TRUE(ValidateReduce("all_reduce", DType::kI64, ReduceOp::kSum).ok());
  EXPECT_THAT(ValidateReduce("reduce_scatter", DType::kI64, ReduceOp::kAvg).message(),
              HasSubstr("reduce_scatter: avg of a i64 tensor is not defined"));
  EXPECT_THAT(ValidateReduce("all_reduce", DType::kBool, ReduceOp::kSum).message(),
              HasSubstr("sum of a bool tensor is not supported"));
}

}  // namespace
}  // namespace cctune
