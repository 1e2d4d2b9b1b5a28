#include "kernels/cpu/nf4_linear.h"

#include <cmath>
#include <tuple>
#include <vector>

#include "core/random.h"
#include "core/status.h"
#include "gtest/gtest.h"
#include "kernels/cpu/isa_test_util.h"

namespace cctune {
namespace cpu {
namespace {

std::vector<float> Normal(int64_t n, double std, uint64_t seed) {
  Generator gen(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(gen.Normal() * std);
  return v;
}

// (m, n, k): decode-like, training-like, k not a multiple of 64 (blocks straddle rows).
class Nf4LinearTest : public testing::IsaLevelTupleTest<std::tuple<int64_t, int64_t, int64_t>> {};

// Forward and dx against fp64 products with the fp64 dequantized weight.
TEST_P(Nf4LinearTest, ForwardAndDxMatchFp64) {
  const auto [m, n, k] = std::get<1>(GetParam());
  const std::vector<float> w = Normal(n * k, 0.02, 1);
  const Nf4Quantized q = ValueOrDie(QuantizeNf4(w.data(), n * k, "w"));
  std::vector<double> wd(n * k);
  {
    const auto& levels = Nf4Levels();
    for (int64_t e = 0; e < n * k; ++e) {
      const int code = e % 2 == 0 ? q.codes[e / 2] >> 4 : q.codes[e / 2] & 0xF;
      const int64_t b = e / kNf4BlockSize;
      wd[e] = levels[code] * (static_cast<double>(q.quantized_scalers[b]) /
                                  q.quantization_factor[b / kNf4ScalerBlockSize] +
                              q.scaler_mean);
    }
  }
  const std::vector<float> x = Normal(m * k, 1.0, 2);
  const std::vector<float> dy = Normal(m * n, 1.0, 3);
  std::vector<float> y(m * n, std::nanf(""));
  Nf4LinearForward(m, n, k, x.data(), q.view(), y.data());
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0, mag = 0;
      for (int64_t c = 0; c < k; ++c) {
        acc += double{x[i * k + c]} * wd[j * k + c];
        mag += std::fabs(double{x[i * k + c]} * wd[j * k + c]);
      }
      ASSERT_NEAR(y[i * n + j], acc, 1e-5 * mag + 1e-30) << i << "," << j;
    }
  }
  const std::vector<float> dx0 = Normal(m * k, 1.0, 4);
  std::vector<float> dx = dx0;
  Nf4LinearBackwardDx(m, n, k, dy.data(), q.view(), dx.data());
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t c = 0; c < k; ++c) {
      double acc = dx0[i * k + c], mag = std::fabs(acc);
      for (int64_t j = 0; j < n; ++j) {
        acc += double{dy[i * n + j]} * wd[j * k + c];
        mag += std::fabs(double{dy[i * n + j]} * wd[j * k + c]);
      }
      ASSERT_NEAR(dx[i * k + c], acc, 1e-5 * mag + 1e-30) << i << "," << c;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Nf4LinearTest,
    ::testing::Combine(::testing::ValuesIn(kAllIsaLevels),
                       ::testing::Values(std::make_tuple(int64_t{1}, int64_t{256}, int64_t{128}),
                                         std::make_tuple(int64_t{70}, int64_t{128}, int64_t{384}),
                                         std::make_tuple(int64_t{5}, int64_t{1024}, int64_t{48}),
                                         std::make_tuple(int64_t{300}, int64_t{64}, int64_t{1024}))));

}  // namespace
}  // namespace cpu
}  // namespace cctune
