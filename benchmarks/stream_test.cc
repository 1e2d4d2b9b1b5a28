#include "benchmarks/stream.h"

#include <cstdint>
#include <vector>

#include "core/random.h"
#include "gtest/gtest.h"

namespace cctune::bench {
namespace {

TEST(StreamTest, KernelsComputeStreamFormulas) {
  Generator gen(11);
  for (int64_t n : {1, 7, 1000, 100003}) {
    std::vector<double> a(n), b(n), c(n);
    for (int64_t i = 0; i < n; ++i) {
      a[i] = gen.UniformDouble();
      b[i] = gen.UniformDouble();
      c[i] = gen.UniformDouble();
    }
    const std::vector<double> a0 = a;
    StreamCopy(c.data(), a.data(), n);  // c = a
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(c[i], a0[i]) << "copy n=" << n << " i=" << i;
    StreamScale(b.data(), c.data(), 3.0, n);  // b = 3a
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(b[i], 3.0 * a0[i]) << "scale i=" << i;
    StreamAdd(c.data(), a.data(), b.data(), n);  // c = a + 3a
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(c[i], a0[i] + 3.0 * a0[i]) << "add i=" << i;
    StreamTriad(a.data(), b.data(), c.data(), -0.5, n);  // a = b - c/2
    double want_sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double want = 3.0 * a0[i] + -0.5 * (a0[i] + 3.0 * a0[i]);
      ASSERT_DOUBLE_EQ(a[i], want) << "triad i=" << i;
      want_sum += a[i];
    }
    EXPECT_NEAR(StreamRead(a.data(), n), want_sum, 1e-9 * n) << "read n=" << n;
  }
}

TEST(StreamTest, FillWritesEveryElement) {
  std::vector<double> x(1001, -1.0);
  FillStreamArray(x.data(), 2.5, 1000);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(x[i], 2.5) << i;
  EXPECT_EQ(x[1000], -1.0);
}

}  // namespace
}  // namespace cctune::bench
