#include "tests/util/float_near.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace cctune::testing {

double FloatUlp(double x) {
  const float a = static_cast<float>(std::min<double>(std::fabs(x), std::numeric_limits<float>::max()));
  if (a < std::numeric_limits<float>::min()) return std::ldexp(1.0, -149);
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  return std::ldexp(1.0, e - 24);
}

::testing::AssertionResult FloatNear(double actual, double expected, double rel, double ulps,
                                     double abs) {
  if (std::isnan(actual) || std::isnan(expected)) {
    return ::testing::AssertionFailure() << actual << " vs " << expected << ": NaN";
  }
  if (actual == expected) return ::testing::AssertionSuccess();  // also equal infinities
  if (std::isinf(actual) || std::isinf(expected)) {
    return ::testing::AssertionFailure() << actual << " vs " << expected;
  }
  const double mag = std::max(std::fabs(actual), std::fabs(expected));
  const double ulp = FloatUlp(mag);
  const double bound = rel * mag + ulps * ulp + abs;
  const double diff = std::fabs(actual - expected);
  if (diff <= bound) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << actual << " vs " << expected << ": |diff| " << diff << " = " << diff / ulp
         << " ULP > bound " << bound << " (rel " << rel << ", " << ulps << " ULP, abs " << abs
         << ")";
}

}  // namespace cctune::testing
