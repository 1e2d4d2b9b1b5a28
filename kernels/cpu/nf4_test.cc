#include "kernels/cpu/nf4.h"

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/random.h"
#include "core/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/isa_test_util.h"

namespace cctune {
namespace cpu {
namespace {

using ::testing::HasSubstr;

// Weights like a layer's: normal, with a scale that varies from block to block.
std::vector<float> RandomWeights(int64_t n, uint64_t seed) {
  Generator gen(seed);
  std::vector<float> x(n);
  for (int64_t b = 0; b < n / kNf4BlockSize; ++b) {
    const double scale = 0.01 * std::exp(gen.Normal() * 0.5);
    for (int64_t k = 0; k < kNf4BlockSize; ++k) {
      x[b * kNf4BlockSize + k] = static_cast<float>(gen.Normal() * scale);
    }
  }
  return x;
}

// torchao's NF4Tensor.from_tensor and get_original_weight in fp64.
struct RefNf4 {
  std::vector<int> codes;
  std::vector<int> qscalers;
  std::vector<double> factors;
  double mean = 0;
  std::vector<double> dequantized;
};

RefNf4 Reference(const std::vector<float>& x) {
  const auto& levels = Nf4Levels();
  const int64_t n = x.size(), blocks = n / kNf4BlockSize;
  RefNf4 r;
  std::vector<double> absmax(blocks, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    absmax[i / kNf4BlockSize] = std::max(absmax[i / kNf4BlockSize], std::fabs(double{x[i]}));
  }
  for (double m : absmax) r.mean += m / blocks;
  for (int64_t g = 0; g < blocks / kNf4ScalerBlockSize; ++g) {
    double m = 0;
    for (int64_t k = 0; k < kNf4ScalerBlockSize; ++k) {
      m = std::max(m, std::fabs(absmax[g * kNf4ScalerBlockSize + k] - r.mean));
    }
    r.factors.push_back(256.0 / (2.0 * m));
    for (int64_t k = 0; k < kNf4ScalerBlockSize; ++k) {
      const double v = std::nearbyint((absmax[g * kNf4ScalerBlockSize + k] - r.mean) * r.factors[g]);
      r.qscalers.push_back(static_cast<int>(std::min(127.0, std::max(-128.0, v))));
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i] / absmax[i / kNf4BlockSize];
    int best = 0;
    for (int k = 1; k < 16; ++k) {
      if (std::fabs(v - levels[k]) < std::fabs(v - levels[best])) best = k;
    }
    r.codes.push_back(best);
    const int64_t b = i / kNf4BlockSize;
    const double scale = r.qscalers[b] / r.factors[b / kNf4ScalerBlockSize] + r.mean;
    r.dequantized.push_back(levels[best] * scale);
  }
  return r;
}

TEST(Nf4Test, LevelsAreTorchaosSixteenAscending) {
  const auto& l = Nf4Levels();
  EXPECT_EQ(l.front(), -1.0f);
  EXPECT_EQ(l.back(), 1.0f);
  EXPECT_EQ(l[7], 0.0f);
  for (int k = 1; k < 16; ++k) EXPECT_LT(l[k - 1], l[k]);
}

TEST(Nf4Test, MatchesFp64ReferenceOfTorchaosAlgorithm) {
  const int64_t n = 3 * kNf4BlockSize * kNf4ScalerBlockSize;
  const std::vector<float> x = RandomWeights(n, 17);
  const Nf4Quantized q = ValueOrDie(QuantizeNf4(x.data(), n, "w"));
  const RefNf4 ref = Reference(x);
  ASSERT_EQ(q.codes.size(), static_cast<size_t>(n / 2));
  ASSERT_EQ(q.quantized_scalers.size(), ref.qscalers.size());
  EXPECT_NEAR(q.scaler_mean, ref.mean, 1e-6 * ref.mean);
  for (size_t g = 0; g < ref.factors.size(); ++g) {
    EXPECT_NEAR(q.quantization_factor[g], ref.factors[g], 1e-5 * ref.factors[g]) << g;
  }
  int64_t scaler_diffs = 0;
  for (size_t b = 0; b < ref.qscalers.size(); ++b) {
    ASSERT_LE(std::abs(q.quantized_scalers[b] - ref.qscalers[b]), 1) << b;
    scaler_diffs += q.quantized_scalers[b] != ref.qscalers[b];
  }
  EXPECT_LE(scaler_diffs, 2);
  // Codes: the first element of a pair in the high nibble; f32 and fp64 may differ on a
  // boundary, by one level and rarely.
  int64_t code_diffs = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int code = i % 2 == 0 ? q.codes[i / 2] >> 4 : q.codes[i / 2] & 0xF;
    ASSERT_LE(std::abs(code - ref.codes[i]), 1) << i;
    code_diffs += code != ref.codes[i];
  }
  EXPECT_LE(code_diffs, n / 10000 + 1);
  std::vector<float> deq(n);
  DequantizeNf4(q, deq.data());
  double err2 = 0, x2 = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int code = i % 2 == 0 ? q.codes[i / 2] >> 4 : q.codes[i / 2] & 0xF;
    if (code == ref.codes[i] && q.quantized_scalers[i / kNf4BlockSize] ==
                                    ref.qscalers[i / kNf4BlockSize]) {
      ASSERT_NEAR(deq[i], ref.dequantized[i], 1e-6 * std::fabs(ref.dequantized[i]) + 1e-12) << i;
    }
    err2 += (deq[i] - double{x[i]}) * (deq[i] - double{x[i]});
    x2 += double{x[i]} * x[i];
  }
  // NF4's reconstruction error on normal weights: about 10% RMS of the signal.
  EXPECT_LT(std::sqrt(err2 / x2), 0.12);
  std::vector<bf16> deq16(n);
  DequantizeNf4(q, deq16.data());
  for (int64_t i = 0; i < n; i += 97) EXPECT_EQ(deq16[i].bits, FloatToBf16(deq[i]).bits) << i;
}

TEST(Nf4Test, PacksTwoCodesPerByteHighNibbleFirst) {
  const int64_t n = kNf4BlockSize * kNf4ScalerBlockSize;
  std::vector<float> x(n, 0.0f);
  for (int64_t b = 0; b < n / kNf4BlockSize; ++b) {
    x[b * kNf4BlockSize] = -1.0f;     // level 0
    x[b * kNf4BlockSize + 1] = 1.0f;  // level 15
  }
  const Nf4Quantized q = ValueOrDie(QuantizeNf4(x.data(), n, "w"));
  EXPECT_EQ(q.codes[0], 0x0F);
  EXPECT_EQ(q.codes[1], 0x77);  // zeros: level 7
  // Every block's absmax is 1: the scales are the mean exactly.
  std::vector<float> deq(n);
  DequantizeNf4(q, deq.data());
  EXPECT_EQ(deq[0], -1.0f);
  EXPECT_EQ(deq[1], 1.0f);
  EXPECT_EQ(deq[2], 0.0f);
}

TEST(Nf4Test, RejectsBadSizesAndValues) {
  std::vector<float> x(kNf4BlockSize * kNf4ScalerBlockSize + 64, 0.5f);
  absl::StatusOr<Nf4Quantized> bad = QuantizeNf4(x.data(), x.size(), "layers.0.attn.q_proj.weight");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("layers.0.attn.q_proj.weight has 16448 elements"));
  x[5] = std::nanf("");
  bad = QuantizeNf4(x.data(), kNf4BlockSize * kNf4ScalerBlockSize, "w");
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("non-finite value (nan) at element 5"));
}

TEST(Nf4Test, LevelsAreBitsandbytesFullPrecisionTable) {
  // torchao's / bitsandbytes' table to the digits they print it with (not rounded to 4).
  EXPECT_FLOAT_EQ(Nf4Levels()[1], -0.6961928009986877f);
  EXPECT_FLOAT_EQ(Nf4Levels()[8], 0.07958029955625534f);
  EXPECT_FLOAT_EQ(Nf4Levels()[14], 0.7229568362236023f);
}

TEST(Nf4Test, QuantizesBf16InputAsItsF32Values) {
  const int64_t n = 2 * kNf4GroupSize;
  std::vector<float> x = RandomWeights(n, 5);
  std::vector<bf16> x16(n);
  for (int64_t i = 0; i < n; ++i) {
    x16[i] = FloatToBf16(x[i]);
    x[i] = Bf16ToFloat(x16[i]);
  }
  const Nf4Quantized ref = ValueOrDie(QuantizeNf4(x.data(), n, "w"));
  Nf4Quantized q;
  q.numel = n;
  q.codes.resize(n / 2);
  q.quantized_scalers.resize(n / kNf4BlockSize);
  q.quantization_factor.resize(n / kNf4GroupSize);
  ASSERT_TRUE(QuantizeNf4Into(x16.data(), n, "w",
                              {n, q.codes.data(), q.quantized_scalers.data(),
                               q.quantization_factor.data(), &q.scaler_mean})
                  .ok());
  EXPECT_EQ(q.codes, ref.codes);
  EXPECT_EQ(q.quantized_scalers, ref.quantized_scalers);
  EXPECT_EQ(q.quantization_factor, ref.quantization_factor);
  EXPECT_EQ(q.scaler_mean, ref.scaler_mean);
  EXPECT_EQ(Nf4Bytes(n), n / 2 + n / 64 + 2 * 4 + 4);
}

class Nf4RangeLevelTest : public testing::IsaLevelTest {};

// Every ISA path, on ranges that start and end inside blocks (the scalar edges) and span
// whole ones (the SIMD body), against level · scale in fp64.
TEST_P(Nf4RangeLevelTest, MatchesFp64AtEveryLevel) {
  const int64_t n = 2 * kNf4GroupSize;
  const std::vector<float> x = RandomWeights(n, 23);
  const Nf4Quantized q = ValueOrDie(QuantizeNf4(x.data(), n, "w"));
  const auto& levels = Nf4Levels();
  // level · (q / factor + mean) in fp64, and the f32 rounding bound of its two steps
  // (q / factor and the mean may cancel).
  auto ref = [&](int64_t e, double* tol) {
    const int code = e % 2 == 0 ? q.codes[e / 2] >> 4 : q.codes[e / 2] & 0xF;
    const int64_t b = e / kNf4BlockSize;
    const double qs = q.quantized_scalers[b] / double{q.quantization_factor[b / kNf4ScalerBlockSize]};
    *tol = 4 * 6e-8 * std::fabs(levels[code]) * (std::fabs(qs) + std::fabs(q.scaler_mean));
    return levels[code] * (qs + q.scaler_mean);
  };
  for (auto [begin, end] : std::vector<std::pair<int64_t, int64_t>>{
           {0, n}, {3, 3 + 64 * 5 + 7}, {64, 128}, {1000, 1001}, {n - 130, n}, {77, 77}}) {
    std::vector<float> out(end - begin + 1, -7.0f);
    DequantizeNf4Range(q.view(), begin, end, out.data());
    for (int64_t e = begin; e < end; ++e) {
      double tol = 0;
      const double r = ref(e, &tol);
      ASSERT_NEAR(out[e - begin], r, tol) << e << " in [" << begin << ", " << end << ")";
    }
    EXPECT_EQ(out[end - begin], -7.0f) << "wrote past the range";
  }
}
CCTUNE_INSTANTIATE_ISA_LEVELS(Nf4RangeLevelTest);

}  // namespace
}  // namespace cpu
}  // namespace cctune
