#include "core/dtype.h"

#include <cmath>
#include <cstring>
#include <random>

#include "gtest/gtest.h"

namespace cctune {
namespace {

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Reference rounding: the representable value nearest to x (ties to the even pattern), found
// by comparing distances in double between the two neighbouring candidates.
template <typename ToF>
uint16_t NearestBits(double x, uint16_t lo, uint16_t hi, ToF to_float) {
  const double dlo = std::fabs(x - to_float(lo)), dhi = std::fabs(x - to_float(hi));
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return (lo & 1) ? hi : lo;
}

TEST(DTypeTest, SizesAndNames) {
  EXPECT_EQ(DTypeSize(DType::kF32), 4u);
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kI32), 4u);
  EXPECT_EQ(DTypeSize(DType::kI64), 8u);
  EXPECT_STREQ(DTypeName(DType::kBF16), "bf16");
}

TEST(DTypeTest, ParseAcceptsTorchtuneSpellingsAndRejectsOthers) {
  EXPECT_EQ(*ParseDType("fp32"), DType::kF32);
  EXPECT_EQ(*ParseDType("bf16"), DType::kBF16);
  EXPECT_EQ(*ParseDType("BF16"), DType::kBF16);
  EXPECT_EQ(*ParseDType("float16"), DType::kF16);
  EXPECT_EQ(*ParseDType("I64"), DType::kI64);
  auto bad = ParseDType("fp8");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'fp8'"), std::string::npos);
}

TEST(DTypeTest, Bf16RoundTripsEveryPattern) {
  for (uint32_t b = 0; b < 65536; ++b) {
    bf16 x{static_cast<uint16_t>(b)};
    const float f = Bf16ToFloat(x);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(f))));
      continue;
    }
    EXPECT_EQ(FloatToBf16(f).bits, b);
  }
}

TEST(DTypeTest, Bf16RoundsToNearestEven) {
  std::mt19937 rng(1);
  for (int i = 0; i < 200000; ++i) {
    const uint32_t u = rng();
    const float f = FromBits(u);
    if (!std::isfinite(f) || std::fabs(f) > 3e38f) continue;
    const uint16_t lo = static_cast<uint16_t>(u >> 16);  // truncation toward zero in magnitude
    const uint16_t hi = static_cast<uint16_t>(lo + 1);
    const uint16_t want = NearestBits(
        f, lo, hi, [](uint16_t b) { return static_cast<double>(Bf16ToFloat(bf16{b})); });
    ASSERT_EQ(FloatToBf16(f).bits, want) << "f=" << f;
  }
  EXPECT_EQ(FloatToBf16(1.0f).bits, 0x3f80);
  // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(FloatToBf16(1.00390625f).bits, 0x3f80);
  EXPECT_EQ(FloatToBf16(1.01171875f).bits, 0x3f82);  // 1 + 3*2^-8: ties up to even
}

TEST(DTypeTest, F16RoundTripsEveryPattern) {
  for (uint32_t b = 0; b < 65536; ++b) {
    f16 x{static_cast<uint16_t>(b)};
    const float f = F16ToFloat(x);
    if (std::isnan(f)) continue;
    EXPECT_EQ(FloatToF16(f).bits, b) << "pattern " << b;
  }
  EXPECT_EQ(F16ToFloat(f16{0x3c00}), 1.0f);
  EXPECT_EQ(F16ToFloat(f16{0x0001}), std::ldexp(1.0f, -24));
  EXPECT_EQ(F16ToFloat(f16{0x7bff}), 65504.0f);
}

TEST(DTypeTest, F16RoundsToNearestEvenAgainstDoubleReference) {
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> mag(-30.f, 17.f);
  for (int i = 0; i < 100000; ++i) {
    const float f = std::exp2(mag(rng)) * ((rng() & 1) ? -1.f : 1.f);
    const f16 got = FloatToF16(f);
    const double gf = F16ToFloat(got);
    if (std::fabs(f) >= 65520.f) {
      EXPECT_TRUE(std::isinf(gf));
      continue;
    }
    // No other f16 value is closer: check both neighbours of the result.
    for (int delta : {-1, 1}) {
      const uint16_t nb = static_cast<uint16_t>(got.bits + delta);
      const double nf = F16ToFloat(f16{nb});
      if (std::isnan(nf) || std::isinf(nf) || ((nb ^ got.bits) & 0x8000)) continue;
      ASSERT_LE(std::fabs(gf - f), std::fabs(nf - f)) << "f=" << f;
      if (std::fabs(gf - f) == std::fabs(nf - f)) {
        ASSERT_EQ(got.bits & 1, 0) << "f=" << f;
      }
    }
  }
}

TEST(DTypeTest, LoadStoreDouble) {
  int64_t buf[2] = {0, 0};
  StoreFromDouble(buf, DType::kI64, 1, -7.0);
  EXPECT_EQ(buf[1], -7);
  EXPECT_EQ(LoadAsDouble(buf, DType::kI64, 1), -7.0);
}

}  // namespace
}  // namespace cctune
