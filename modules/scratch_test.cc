#include "modules/scratch.h"

#include "gtest/gtest.h"

namespace cctune {
namespace {

TEST(ScratchTest, ReusesMemoryWhenItFits) {
  Scratch s;
  Tensor a = ValueOrDie(s.Get(0, {4, 8}, DType::kF32, Device::Cpu()));
  EXPECT_EQ(a.shape(), (Shape{4, 8}));
  EXPECT_TRUE(a.is_contiguous());
  Tensor b = ValueOrDie(s.Get(0, {2, 3}, DType::kBF16, Device::Cpu()));
  EXPECT_EQ(b.dtype(), DType::kBF16);
  EXPECT_TRUE(a.SharesStorageWith(b));
  EXPECT_EQ(a.raw_data(), b.raw_data());
  EXPECT_EQ(s.Bytes(), 4u * 8 * 4);
}

TEST(ScratchTest, SlotsAreIndependentAndGrow) {
  Scratch s;
  Tensor a = ValueOrDie(s.Get(0, {16}, DType::kF32, Device::Cpu()));
  Tensor b = ValueOrDie(s.Get(3, {16}, DType::kF32, Device::Cpu()));
  EXPECT_FALSE(a.SharesStorageWith(b));
  Tensor bigger = ValueOrDie(s.Get(0, {17}, DType::kF32, Device::Cpu()));
  EXPECT_FALSE(bigger.SharesStorageWith(a));  // reallocated; `a` keeps its own memory alive
  a.data<float>()[0] = 1.5f;
  EXPECT_EQ(a.data<float>()[0], 1.5f);
  EXPECT_EQ(s.Bytes(), 17u * 4 + 16u * 4);
  s.Clear();
  EXPECT_EQ(s.Bytes(), 0u);
}

TEST(ScratchTest, EmptyShapesAndMeta) {
  Scratch s;
  Tensor e = ValueOrDie(s.Get(0, {0, 5}, DType::kF32, Device::Cpu()));
  EXPECT_EQ(e.numel(), 0);
  Tensor m = ValueOrDie(s.Get(1, {1 << 20, 1 << 20}, DType::kF32, Device::Meta()));
  EXPECT_TRUE(m.device().is_meta());
  EXPECT_EQ(m.shape(), (Shape{1 << 20, 1 << 20}));
}

TEST(ScratchTest, SharedPoolHandsOutOffsetSlots) {
  auto pool = std::make_shared<Scratch>();
  Scratch a, b, c;
  Tensor own = ValueOrDie(a.Get(0, {8}, DType::kF32, Device::Cpu()));
  EXPECT_EQ(a.Bytes(), 32u);
  a.Share(pool, 0);
  b.Share(pool, 0);
  c.Share(pool, 2);
  EXPECT_TRUE(a.shared());
  EXPECT_EQ(a.Bytes(), 0u);  // its own buffers are dropped
  Tensor a1 = ValueOrDie(a.Get(1, {4, 4}, DType::kF32, Device::Cpu()));
  Tensor b1 = ValueOrDie(b.Get(1, {2, 8}, DType::kF32, Device::Cpu()));
  EXPECT_EQ(a1.raw_data(), b1.raw_data());  // same slot of the pool
  EXPECT_FALSE(own.SharesStorageWith(a1));
  Tensor c0 = ValueOrDie(c.Get(0, {4}, DType::kF32, Device::Cpu()));
  Tensor pool2 = ValueOrDie(pool->Get(2, {4}, DType::kF32, Device::Cpu()));
  EXPECT_EQ(c0.raw_data(), pool2.raw_data());  // c's slot 0 is the pool's slot 2
  EXPECT_FALSE(c0.SharesStorageWith(a1));
  EXPECT_EQ(pool->Bytes(), 16u * 4 + 4u * 4);
  a.Share(nullptr, 0);  // buffers of its own again
  EXPECT_FALSE(a.shared());
  Tensor again = ValueOrDie(a.Get(1, {4, 4}, DType::kF32, Device::Cpu()));
  EXPECT_FALSE(again.SharesStorageWith(b1));
  EXPECT_EQ(a.Bytes(), 64u);
}

}  // namespace
}  // namespace cctune
