#include "kernels/cpu/cpu_util.h"

#include <cmath>
#include <vector>

#include "core/random.h"
#include "gtest/gtest.h"

namespace cctune {
namespace cpu {
namespace {

TEST(CpuUtilTest, LoadStoreMatchCoreConversions) {
  Generator gen(1);
  for (int64_t n : {1, 7, 8, 9, 33, 130}) {
    for (int64_t stride : {1, 3}) {
      std::vector<float> src(n);
      for (float& x : src) x = static_cast<float>(gen.Normal() * 100.0);
      src[0] = 1e-6f;  // f16 subnormal
      std::vector<bf16> b(n * stride);
      std::vector<f16> h(n * stride);
      StoreF32(src.data(), b.data(), DType::kBF16, stride, n);
      StoreF32(src.data(), h.data(), DType::kF16, stride, n);
      std::vector<float> lb(n), lh(n);
      LoadF32(b.data(), DType::kBF16, stride, n, lb.data());
      LoadF32(h.data(), DType::kF16, stride, n, lh.data());
      for (int64_t i = 0; i < n; ++i) {
        EXPECT_EQ(b[i * stride].bits, FloatToBf16(src[i]).bits) << i;
        EXPECT_EQ(h[i * stride].bits, FloatToF16(src[i]).bits) << i;
        EXPECT_EQ(lb[i], Bf16ToFloat(FloatToBf16(src[i])));
        EXPECT_EQ(lh[i], F16ToFloat(FloatToF16(src[i])));
      }
      std::vector<float> rb = src, rh = src;
      RoundTo(DType::kBF16, rb.data(), n);
      RoundTo(DType::kF16, rh.data(), n);
      EXPECT_EQ(rb, lb);
      EXPECT_EQ(rh, lh);
    }
  }
}

TEST(CpuUtilTest, FastExpWithinTwoUlp) {
  for (double x = -87.0; x <= 88.0; x += 0.001373) {
    const float xf = static_cast<float>(x);
    const double want = std::exp(static_cast<double>(xf));
    EXPECT_NEAR(FastExp(xf), want, 2.5e-7 * want) << xf;
  }
  // Subnormal results: within one subnormal step; far below, zero.
  for (double x = -103.0; x <= -87.0; x += 0.0173) {
    const float xf = static_cast<float>(x);
    EXPECT_NEAR(FastExp(xf), std::exp(static_cast<double>(xf)),
                std::ldexp(1.0, -149) + 2.5e-7 * std::exp(static_cast<double>(xf)))
        << xf;
  }
  EXPECT_EQ(FastExp(-104.f), 0.f);
  EXPECT_EQ(FastExp(0.f), 1.f);
  EXPECT_EQ(FastExp(-INFINITY), 0.f);
  EXPECT_EQ(FastExp(-110.f), 0.f);
  EXPECT_TRUE(std::isnan(FastExp(NAN)));
}

TEST(CpuUtilTest, CoalesceMergesContiguousDims) {
  const int64_t shape[3] = {2, 3, 4};
  const int64_t contiguous[3] = {12, 4, 1};
  const int64_t sliced[3] = {24, 8, 1};  // rows of 8 with 4 used
  const int64_t* both[2] = {contiguous, contiguous};
  IterSpace it = Coalesce(shape, 3, both, 2);
  EXPECT_EQ(it.ndim, 1);
  EXPECT_EQ(it.shape[0], 24);
  const int64_t* mixed[2] = {contiguous, sliced};
  it = Coalesce(shape, 3, mixed, 2);
  ASSERT_EQ(it.ndim, 2);
  EXPECT_EQ(it.shape[0], 6);
  EXPECT_EQ(it.shape[1], 4);
  EXPECT_EQ(it.strides[1][0], 8);
  // ForEachChunk visits every element once.
  std::vector<int> seen(48, 0);
  ForEachChunk(it, 2, 3, [&](const int64_t* off, int64_t len) {
    for (int64_t i = 0; i < len; ++i) ++seen[off[1] + i * it.strides[1][1]];
  });
  for (int64_t r = 0; r < 6; ++r) {
    for (int64_t c = 0; c < 8; ++c) EXPECT_EQ(seen[r * 8 + c], c < 4 ? 1 : 0);
  }
}

TEST(CpuUtilTest, RowIndexerFollowsStrides) {
  auto t = ValueOrDie(Tensor::Empty({3, 4, 5}, DType::kF32));
  auto v = ValueOrDie(t.Transpose(0, 1));  // [4, 3, 5]
  const RowIndexer rows(v.strided_view());
  EXPECT_EQ(rows.rows(), 12);
  EXPECT_EQ(rows.row_length(), 5);
  EXPECT_EQ(rows.Offset(0), 0);
  EXPECT_EQ(rows.Offset(1), 20);                          // [0, 1, :]
  EXPECT_EQ(rows.Offset(3), 5);                           // [1, 0, :]
  EXPECT_EQ(ElementOffset(v.strided_view(), 7), 20 + 2);  // [0, 1, 2]
}

}  // namespace
}  // namespace cpu
}  // namespace cctune
