// Test helpers for the op tests (kernels/*_test.cc): random tensors, the same values in other
// memory layouts, fp64 read-back and per-dtype tolerances.
#ifndef CCTUNE_KERNELS_CPU_OP_TEST_UTIL_H_
#define CCTUNE_KERNELS_CPU_OP_TEST_UTIL_H_

#include <functional>
#include <string>
#include <vector>

#include "core/random.h"
#include "core/tensor.h"
#include "gtest/gtest.h"

namespace cctune {
namespace testing {

// A CPU tensor of N(0, std^2) values stored as `dtype` (so already rounded to it).
Tensor Randn(const Shape& shape, DType dtype, Generator& gen, double std = 1.0);

enum class Layout {
  kContiguous,
  kPadded,      // last dim contiguous, rows padded (a Narrow of a wider tensor)
  kTransposed,  // every dim reversed in memory and the innermost one stepped by 2
};
const char* LayoutName(Layout l);
constexpr Layout kAllLayouts[] = {Layout::kContiguous, Layout::kPadded, Layout::kTransposed};
constexpr DType kFloatTypes[] = {DType::kF32, DType::kBF16, DType::kF16};

// The values of t in a fresh tensor of the given layout (and dtype, default t's).
Tensor WithLayout(const Tensor& t, Layout layout);
Tensor WithLayout(const Tensor& t, Layout layout, DType dtype);
// An uninitialised CPU tensor of that shape, dtype and layout.
Tensor EmptyLike(const Shape& shape, DType dtype, Layout layout);

// Row-major values as doubles.
std::vector<double> Values(const Tensor& t);

// The unit roundoff of storing into `t`: 2^-24 (f32), 2^-9 (bf16), 2^-12 (f16).
double Roundoff(DType t);
// The spacing of subnormals of `t` (f16: 2^-24; others: 0 for these tests' magnitudes), an
// absolute error floor for results that land in f16's subnormal range.
double SubnormalStep(DType t);

// |actual[i] - want[i]| <= atol[i] + rtol * |want[i]| for every i; reports the first few
// failures with `what`. atol may hold one value for all.
void ExpectClose(const std::vector<double>& actual, const std::vector<double>& want,
                 const std::vector<double>& atol, double rtol, const std::string& what);

// ---- Gradient checks (kernels/*_backward_test.cc) ----

// Central finite differences of the fp64 scalar function f at x:
// g[i] = (f(x + h·e_i) - f(x - h·e_i)) / 2h, with h = step · max(1, |x_i|). For smooth fp64
// functions of O(1) values the error is about 1e-9 relative at the default step.
std::vector<double> NumericGradient(const std::function<double(const std::vector<double>&)>& f,
                                    std::vector<double> x, double step = 1e-5);

// sum_i a[i] · b[i].
double DotProduct(const std::vector<double>& a, const std::vector<double>& b);

// Gradient check: |actual[i] - want[i]| <= tol · (max_j |want[j]| + |want[i]|) for every i.
// Gradients of f32 kernels land within a few 1e-6 of an exact reference in this norm.
void ExpectGradClose(const std::vector<double>& actual, const std::vector<double>& want,
                     double tol, const std::string& what);

// a[i] - b[i] (e.g. an accumulated gradient minus its initial values).
std::vector<double> Minus(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace testing
}  // namespace cctune

#endif  // CCTUNE_KERNELS_CPU_OP_TEST_UTIL_H_
