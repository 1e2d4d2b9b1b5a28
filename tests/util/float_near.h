// Float comparisons that scale with the compared values, for tests.
//
// An absolute tolerance means nothing without the magnitude: 1e-7 is 1.7 float ULPs at 0.7 and
// less than one at 1.6, where any change of rounding (another ISA path, another summation
// order) breaks the test. FloatNear bounds |actual - expected| by a relative part, a number of
// float ULPs of the larger magnitude, and an optional absolute floor (for values near 0):
//
//   EXPECT_TRUE(FloatNear(loss_b, loss_a, /*rel=*/1e-6));
//   ASSERT_TRUE(FloatNear(p_b[i], p_a[i], /*rel=*/0, /*ulps=*/2, /*abs=*/lr * dg)) << i;
//
// Where a test wants bit-identity it should compare two runs of the same code path with
// EXPECT_EQ instead.
#ifndef CCTUNE_TESTS_UTIL_FLOAT_NEAR_H_
#define CCTUNE_TESTS_UTIL_FLOAT_NEAR_H_

#include "gtest/gtest.h"

namespace cctune::testing {

// The spacing of floats at |x|: 2^(e - 23) for |x| in [2^e, 2^(e+1)); for subnormals and 0 the
// subnormal spacing 2^-149.
double FloatUlp(double x);

// |actual - expected| <= rel * max(|actual|, |expected|) + ulps * FloatUlp(max(...)) + abs.
// NaN never matches; equal infinities do. The failure message gives the difference in ULPs.
::testing::AssertionResult FloatNear(double actual, double expected, double rel,
                                     double ulps = 0, double abs = 0);

}  // namespace cctune::testing

#endif  // CCTUNE_TESTS_UTIL_FLOAT_NEAR_H_
