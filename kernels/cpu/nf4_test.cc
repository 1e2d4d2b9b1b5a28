#include "kernels/cpu/nf4.h"

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/random.h"
#include "core/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

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

}  // namespace
}  // namespace cpu
}  // namespace cctune
