#include "distributed/collective_call.h"

#include "core/tensor.h"
#include "distributed/process_group.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;

CollectiveCall Call(CollectiveKind kind, int64_t numel, DType dtype, int arg) {
  CollectiveCall c;
  c.seq = 3;
  c.kind = static_cast<int32_t>(kind);
  c.numel = numel;
  c.dtype = static_cast<int32_t>(dtype);
  c.arg = arg;
  return c;
}

TEST(CollectiveCallTest, Describes) {
  EXPECT_EQ(DescribeCall(Call(CollectiveKind::kAllReduce, 1000, DType::kF32,
                              static_cast<int>(ReduceOp::kAvg))),
            "all_reduce #3 (avg of 1000 f32 elements)");
  EXPECT_EQ(DescribeCall(Call(CollectiveKind::kReduceScatter, 8, DType::kBF16, 0)),
            "reduce_scatter #3 (sum, 8 bf16 elements per rank)");
  EXPECT_EQ(DescribeCall(Call(CollectiveKind::kAllGather, 8, DType::kF16, 0)),
            "all_gather #3 (8 f16 elements per rank)");
  EXPECT_EQ(DescribeCall(Call(CollectiveKind::kBroadcast, 10, DType::kI64, 1)),
            "broadcast #3 (10 i64 elements from rank 1)");
  EXPECT_EQ(DescribeCall(Call(CollectiveKind::kBarrier, 0, DType::kF32, 0)), "barrier #3");
  EXPECT_STREQ(CollectiveName(99), "an unknown collective");
}

TEST(CollectiveCallTest, SameCallIgnoresTheSender) {
  CollectiveCall a = Call(CollectiveKind::kAllGather, 8, DType::kF16, 0);
  CollectiveCall b = a;
  b.rank = 5;
  EXPECT_TRUE(SameCall(a, b));
  b.numel = 9;
  EXPECT_FALSE(SameCall(a, b));
  b = a;
  b.seq = 4;
  EXPECT_FALSE(SameCall(a, b));
}

TEST(CollectiveCallTest, RankListNamesAtMostSixteen) {
  EXPECT_EQ(RankList({1}, 2), "rank 1");
  EXPECT_EQ(RankList({1, 3}, 8), "ranks 1, 3 (2 of 8)");
  std::vector<int> many;
  for (int r = 1; r < 40; ++r) many.push_back(r);
  EXPECT_THAT(RankList(many, 40), HasSubstr("15, 16, ... (39 of 40)"));
}

TEST(CollectiveCallTest, ChunkSizes) {
  auto small = Tensor::Zeros({3}, DType::kF32);
  auto big = Tensor::Zeros({6}, DType::kF32);
  auto other = Tensor::Zeros({6}, DType::kBF16);
  ASSERT_TRUE(small.ok() && big.ok() && other.ok());
  EXPECT_TRUE(CheckChunkSizes("all_gather", *small, *big, 2).ok());
  EXPECT_THAT(CheckChunkSizes("all_gather", *small, *big, 3).message(),
              HasSubstr("all_gather: the per-rank tensor has 3 f32 elements and the full one 6 "
                        "f32 (world size 3: it needs 9 f32)"));
  EXPECT_FALSE(CheckChunkSizes("x", *small, *other, 2).ok());
}

}  // namespace
}  // namespace cctune
