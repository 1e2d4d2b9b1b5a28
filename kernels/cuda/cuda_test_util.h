// Test helpers for the CUDA backend: the skip check for machines without a GPU, CPU/CUDA
// tensor pairs built from the same random data, and element-wise comparisons. Uses only
// core's public API, so it builds (and the tests skip) without the CUDA toolkit too.
#ifndef CCTUNE_KERNELS_CUDA_CUDA_TEST_UTIL_H_
#define CCTUNE_KERNELS_CUDA_CUDA_TEST_UTIL_H_

#include <functional>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/random.h"
#include "core/status.h"
#include "core/tensor.h"
#include "gtest/gtest.h"

namespace cctune {
namespace testing {

// OK when cuda:0 can run work; otherwise why not: the backend is not linked in, or
// cudaGetDeviceCount's error (no driver, no device).
absl::Status CudaStatus();

// A CPU tensor and a tensor on cuda:0 with the same shape, dtype and (for inputs) values.
struct Pair {
  Tensor cpu;
  Tensor gpu;
};

// N(0, scale^2) draws rounded to `dtype` (floating dtypes), the same on both devices.
Pair RandomPair(const Shape& shape, DType dtype, Generator& gen, double scale = 1.0);
// Integers uniform in [low, high) as i32 / i64.
Pair RandomIntPair(const Shape& shape, DType dtype, int64_t low, int64_t high, Generator& gen);
// Both sides hold a copy of `cpu`.
Pair PairFrom(const Tensor& cpu);
// Outputs: distinct NaN-filled tensors (so unwritten elements show up as mismatches).
Pair OutputPair(const Shape& shape, DType dtype);
// The same view on both sides, e.g. ViewPair(p, [](const Tensor& t) { return t.Transpose(0, 1); }).
Pair ViewPair(const Pair& p, const std::function<absl::StatusOr<Tensor>(const Tensor&)>& view);

// Spacing of `dtype` at 1.0: 2^-23 (f32), 2^-7 (bf16), 2^-10 (f16).
double Ulp(DType dtype);

// |gpu - cpu| <= atol + rtol * |cpu| for every element (NaN must match NaN). Shapes and dtypes
// must be equal. The message lists the worst elements.
::testing::AssertionResult AllClose(const Tensor& gpu, const Tensor& cpu, double atol, double rtol);
// Exactly the same values (floats bit for bit, so -0 != +0 and NaN payloads count).
::testing::AssertionResult AllEqual(const Tensor& gpu, const Tensor& cpu);

}  // namespace testing
}  // namespace cctune

// Skips the current test when no CUDA device can be used, saying why.
#define CCTUNE_SKIP_WITHOUT_CUDA()                                              \
  do {                                                                          \
    const ::absl::Status cctune_cuda_status_ = ::cctune::testing::CudaStatus(); \
    if (!cctune_cuda_status_.ok()) {                                            \
      GTEST_SKIP() << "no CUDA device: " << cctune_cuda_status_.message();      \
    }                                                                           \
  } while (0)

#define CCTUNE_ASSERT_OK(expr)                                                       \
  do {                                                                               \
    const ::absl::Status cctune_assert_status_ = ::cctune::internal::ToStatus(expr); \
    ASSERT_TRUE(cctune_assert_status_.ok()) << cctune_assert_status_;                \
  } while (0)

#define CCTUNE_ASSERT_OK_AND_ASSIGN(lhs, rexpr) \
  CCTUNE_ASSERT_OK_AND_ASSIGN_IMPL_(CCTUNE_CONCAT_(cctune_assert_or_, __LINE__), lhs, rexpr)
#define CCTUNE_ASSERT_OK_AND_ASSIGN_IMPL_(so, lhs, rexpr) \
  auto so = (rexpr);                                      \
  ASSERT_TRUE(so.ok()) << so.status();                    \
  lhs = std::move(so).value()

#endif  // CCTUNE_KERNELS_CUDA_CUDA_TEST_UTIL_H_
