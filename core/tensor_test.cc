#include "core/tensor.h"

#include <numeric>

#include "core/device_interface.h"
#include "core/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<float> Iota(int n) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), 0.f);
  return v;
}

// Reads element `idx` of any tensor through its strides: an independent path from the copy
// kernels under test.
double At(const Tensor& t, std::vector<int64_t> idx) {
  int64_t off = 0;
  for (size_t i = 0; i < idx.size(); ++i) off += idx[i] * t.stride(i);
  return LoadAsDouble(t.raw_data(), t.dtype(), off);
}

TEST(TensorTest, EmptyHasContiguousStrides) {
  Tensor t = *Tensor::Empty({2, 3, 4}, DType::kF32);
  EXPECT_THAT(t.shape(), ElementsAre(2, 3, 4));
  EXPECT_THAT(t.strides(), ElementsAre(12, 4, 1));
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 96u);
  EXPECT_TRUE(t.is_contiguous());
}

// Full/Zeros fill every element, including across the parallel fill's 256 KiB chunks and
// for element sizes 1, 2, 4 and 8.
TEST(TensorTest, FullAndZerosFillEveryElement) {
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{65536}, int64_t{65536 * 3 + 5},
                    int64_t{1} << 20}) {
    for (DType dt : {DType::kF32, DType::kBF16, DType::kI64, DType::kBool}) {
      const double value = dt == DType::kBool ? 1.0 : -2.5 * (dt != DType::kI64) + 3;
      Tensor full = *Tensor::Full({n}, value, dt);
      std::vector<float> got = *full.ToFloatVector();
      ASSERT_EQ(got.size(), static_cast<size_t>(n));
      const float want = static_cast<float>(value);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(got[i], want) << DTypeName(dt) << " n " << n << " at " << i;
      }
      // Zeros over a recycled (dirty) allocation of the same size.
      Tensor zeros = *Tensor::Zeros({n}, dt);
      got = *zeros.ToFloatVector();
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], 0.f) << DTypeName(dt) << " at " << i;
    }
  }
}

TEST(TensorTest, NegativeShapeIsAnError) {
  auto t = Tensor::Empty({2, -3}, DType::kF32);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("[2, -3]"));
}

TEST(TensorTest, TransposeIsAViewAndContiguousCopies) {
  Tensor t = *Tensor::FromVector(Iota(6), {2, 3});
  Tensor tt = *t.Transpose(0, 1);
  EXPECT_TRUE(tt.SharesStorageWith(t));
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_THAT(tt.shape(), ElementsAre(3, 2));
  EXPECT_EQ(At(tt, {2, 1}), 5.0);
  Tensor c = *tt.Contiguous();
  EXPECT_FALSE(c.SharesStorageWith(t));
  EXPECT_THAT(*c.ToFloatVector(), ElementsAre(0, 3, 1, 4, 2, 5));
}

TEST(TensorTest, SliceNarrowSelect) {
  Tensor t = *Tensor::FromVector(Iota(24), {2, 3, 4});
  Tensor s = *t.Slice(2, 1, 4, 2);  // columns 1 and 3
  EXPECT_THAT(s.shape(), ElementsAre(2, 3, 2));
  EXPECT_EQ(At(s, {1, 2, 1}), 23.0);
  Tensor n = *t.Narrow(1, 1, 2);
  EXPECT_THAT(*n.ToFloatVector(),
              ElementsAre(4, 5, 6, 7, 8, 9, 10, 11, 16, 17, 18, 19, 20, 21, 22, 23));
  Tensor sel = *t.Select(0, 1);
  EXPECT_THAT(sel.shape(), ElementsAre(3, 4));
  EXPECT_EQ(At(sel, {0, 0}), 12.0);
  EXPECT_FALSE(t.Narrow(1, 2, 2).ok());
  EXPECT_FALSE(t.Select(0, 2).ok());
  EXPECT_FALSE(t.Slice(3, 0, 1).ok());
  Tensor neg = *t.Slice(-1, -2, 4);
  EXPECT_EQ(At(neg, {0, 0, 0}), 2.0);
}

TEST(TensorTest, PermuteAndErrors) {
  Tensor t = *Tensor::FromVector(Iota(24), {2, 3, 4});
  Tensor p = *t.Permute({2, 0, 1});
  EXPECT_THAT(p.shape(), ElementsAre(4, 2, 3));
  EXPECT_EQ(At(p, {3, 1, 2}), 1 * 12 + 2 * 4 + 3);
  EXPECT_FALSE(t.Permute({0, 0, 1}).ok());
  EXPECT_FALSE(t.Permute({0, 1}).ok());
}

TEST(TensorTest, ViewFollowsStrideRules) {
  Tensor t = *Tensor::FromVector(Iota(24), {2, 3, 4});
  Tensor v = *t.View({6, -1});
  EXPECT_THAT(v.shape(), ElementsAre(6, 4));
  EXPECT_TRUE(v.SharesStorageWith(t));
  // [b, s, n_h, h_d] -> transpose(1, 2) -> cannot merge s and h_d dims back without a copy.
  Tensor q = *Tensor::FromVector(Iota(2 * 3 * 4 * 5), {2, 3, 4, 5});
  Tensor qt = *q.Transpose(1, 2);  // [2, 4, 3, 5]
  auto bad = qt.View({2, 4, 15});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("Reshape"));
  // Splitting a dim of a non-contiguous tensor is allowed.
  Tensor split = *qt.View({2, 2, 2, 3, 5});
  EXPECT_TRUE(split.SharesStorageWith(q));
  EXPECT_EQ(At(split, {1, 1, 0, 2, 4}), At(qt, {1, 2, 2, 4}));
  // Reshape copies when View cannot.
  Tensor r = *qt.Reshape({2, 4, 15});
  EXPECT_FALSE(r.SharesStorageWith(q));
  EXPECT_EQ(At(r, {1, 3, 7}), At(qt, {1, 3, 1, 2}));
  EXPECT_FALSE(t.View({5, -1}).ok());
  EXPECT_FALSE(t.View({-1, -1}).ok());
}

TEST(TensorTest, ExpandBroadcastsWithZeroStride) {
  Tensor t = *Tensor::FromVector(std::vector<float>{1, 2, 3}, {3, 1});
  Tensor e = *t.Expand({2, 3, 4});
  EXPECT_THAT(e.strides(), ElementsAre(0, 1, 0));
  EXPECT_EQ(At(e, {1, 2, 3}), 3.0);
  Tensor c = *e.Contiguous();
  EXPECT_EQ(c.numel(), 24);
  EXPECT_EQ((*c.ToFloatVector())[23], 3.f);
  EXPECT_FALSE(t.Expand({3, 2}).ok() && false);
  auto bad = t.Expand({4, 4});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("[3, 1]"));
}

TEST(TensorTest, UnsqueezeSqueeze) {
  Tensor t = *Tensor::FromVector(Iota(6), {2, 3});
  Tensor u = *t.Unsqueeze(1);
  EXPECT_THAT(u.shape(), ElementsAre(2, 1, 3));
  Tensor back = *u.Squeeze(1);
  EXPECT_THAT(back.shape(), ElementsAre(2, 3));
  EXPECT_FALSE(t.Squeeze(0).ok());
  EXPECT_THAT((*t.Unsqueeze(-1)).shape(), ElementsAre(2, 3, 1));
}

TEST(TensorTest, DtypeConversionsThroughTo) {
  Generator g(1);
  Tensor t = *RandomNormal({5, 7}, DType::kF32, g);
  for (DType dt : {DType::kBF16, DType::kF16}) {
    Tensor c = *t.To(dt);
    EXPECT_EQ(c.dtype(), dt);
    auto a = *t.ToFloatVector(), b = *c.ToFloatVector();
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], std::fabs(a[i]) * 8e-3);
  }
  Tensor i = *Tensor::FromVector(std::vector<float>{1.7f, -2.2f}, {2});
  EXPECT_THAT(*(*i.To(DType::kI64)).ToInt64Vector(), ElementsAre(1, -2));
}

TEST(TensorTest, CopyFromNonContiguousWithCast) {
  Tensor src = *Tensor::FromVector(Iota(12), {3, 4});
  Tensor dst_full = *Tensor::Zeros({4, 3}, DType::kBF16);
  Tensor dst = *dst_full.Transpose(0, 1);  // [3, 4] non-contiguous view
  ASSERT_TRUE(dst.CopyFrom(src).ok());
  EXPECT_EQ(At(dst_full, {3, 2}), 11.0);
  Tensor wrong = *Tensor::Empty({4, 4}, DType::kF32);
  EXPECT_FALSE(wrong.CopyFrom(src).ok());
}

TEST(TensorTest, AllocatorCountsBytesAndPeak) {
  const Device cpu = Device::Cpu();
  ResetPeakMemory(cpu);
  const MemoryStats before = GetMemoryStats(cpu);
  {
    Tensor a = *Tensor::Empty({1000}, DType::kF32);
    EXPECT_EQ(GetMemoryStats(cpu).current_bytes, before.current_bytes + 4000);
    Tensor view = *a.Narrow(0, 0, 10);  // views allocate nothing
    EXPECT_EQ(GetMemoryStats(cpu).current_bytes, before.current_bytes + 4000);
  }
  const MemoryStats after = GetMemoryStats(cpu);
  EXPECT_EQ(after.current_bytes, before.current_bytes);
  EXPECT_GE(after.peak_bytes, before.current_bytes + 4000);
}

TEST(TensorTest, MetaTensorsAllocateNothing) {
  const MemoryStats before = GetMemoryStats(Device::Cpu());
  // A 405B-sized weight: shape only.
  Tensor m = *Tensor::Empty({128256, 16384}, DType::kBF16, Device::Meta());
  EXPECT_TRUE(m.defined());
  EXPECT_EQ(m.raw_data(), nullptr);
  EXPECT_EQ(m.numel(), int64_t{128256} * 16384);
  EXPECT_EQ(GetMemoryStats(Device::Cpu()).current_bytes, before.current_bytes);
  EXPECT_FALSE(m.ToFloatVector().ok());
}

TEST(TensorTest, CudaWithoutBackendIsAClearError) {
  if (DeviceAvailable(Device::Cuda(0))) GTEST_SKIP() << "a CUDA device is present";
  auto t = Tensor::Empty({4}, DType::kF32, Device::Cuda(0));
  if (t.ok()) GTEST_SKIP() << "CUDA backend linked";
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("cuda"));
}

TEST(TensorTest, FromStorageChecksBounds) {
  auto st = *Storage::Allocate(Device::Cpu(), 64);
  EXPECT_TRUE(Tensor::FromStorage(st, {4, 4}, DType::kF32).ok());
  auto bad = Tensor::FromStorage(st, {4, 4}, DType::kF32, 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("64"));
}

}  // namespace
}  // namespace cctune
