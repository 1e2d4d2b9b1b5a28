#include "checkpoint/dtype_convert.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/random.h"
#include "gtest/gtest.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/isa_test_util.h"

namespace cctune {
namespace {

// Independent IEEE binary16 decoding in double.
double HalfToDouble(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v;
  if (exp == 0) {
    v = std::ldexp(mant, -24);
  } else if (exp == 31) {
    v = mant ? NAN : INFINITY;
  } else {
    v = std::ldexp(1024 + mant, exp - 25);
  }
  return sign ? -v : v;
}

// f16 -> f32 takes F16C from the avx2 level up, portable code below it: both must be exact.
class DTypeConvertLevelTest : public testing::IsaLevelTest {};

TEST_P(DTypeConvertLevelTest, EveryF16AndBf16ValueToF32) {
  // All 65536 patterns, repeated so the parallel chunks and vector tails are exercised.
  const int64_t n = 65536 * 3 + 5;
  std::vector<uint16_t> src(n);
  for (int64_t i = 0; i < n; ++i) src[i] = static_cast<uint16_t>(i * 40503u);
  std::vector<float> out(n);
  ConvertElements(out.data(), DType::kF32, src.data(), DType::kF16, n);
  for (int64_t i = 0; i < n; ++i) {
    const double want = HalfToDouble(src[i]);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(out[i])) << i;
    } else {
      ASSERT_EQ(out[i], want) << "f16 bits " << src[i];
    }
  }
  ConvertElements(out.data(), DType::kF32, src.data(), DType::kBF16, n);
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = static_cast<uint32_t>(src[i]) << 16;
    uint32_t got;
    std::memcpy(&got, &out[i], 4);
    ASSERT_EQ(got, u) << i;
  }
}

TEST_P(DTypeConvertLevelTest, AllPairsMatchScalarReference) {
  const DType kTypes[] = {DType::kF32, DType::kBF16, DType::kF16,
                          DType::kI32, DType::kI64,  DType::kBool};
  Generator gen(21);
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{(1 << 16) + 3}}) {
    for (DType st : kTypes) {
      // Values every dtype can hold: small integers and halves, some zeros for bool.
      std::vector<char> src(n * DTypeSize(st));
      for (int64_t i = 0; i < n; ++i) {
        const double v = IsFloating(st)
                             ? (static_cast<double>(gen.UniformInt(4001)) - 2000.0) / 8.0
                             : static_cast<double>(gen.UniformInt(4001)) - 2000.0;
        StoreFromDouble(src.data(), st, i, gen.UniformInt(5) == 0 ? 0.0 : v);
      }
      for (DType dt : kTypes) {
        SCOPED_TRACE(std::string(DTypeName(st)) + " -> " + DTypeName(dt) + " n=" +
                     std::to_string(n));
        std::vector<char> got(n * DTypeSize(dt)), want(n * DTypeSize(dt));
        ConvertElements(got.data(), dt, src.data(), st, n);
        for (int64_t i = 0; i < n; ++i) {
          const double v = LoadAsDouble(src.data(), st, i);
          StoreFromDouble(want.data(), dt, i, dt == DType::kBool ? (v != 0.0) : v);
        }
        ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0);
      }
    }
  }
}

CCTUNE_INSTANTIATE_ISA_LEVELS(DTypeConvertLevelTest);

TEST(DTypeConvertTest, F32ToBf16RoundsToNearestEven) {
  const float vals[] = {1.0f, 1.00390625f /* tie, rounds down */, 1.01171875f /* tie, up */,
                        -3.14159f, 65504.f};
  bf16 out[5];
  ConvertElements(out, DType::kBF16, vals, DType::kF32, 5);
  EXPECT_EQ(out[0].bits, 0x3f80);
  EXPECT_EQ(out[1].bits, 0x3f80);
  EXPECT_EQ(out[2].bits, 0x3f82);
  EXPECT_EQ(out[3].bits, 0xc049);
  EXPECT_EQ(out[4].bits, 0x4780);
}

}  // namespace
}  // namespace cctune
