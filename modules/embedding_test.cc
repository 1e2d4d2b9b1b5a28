#include "modules/embedding.h"

#include "core/random.h"
#include "gtest/gtest.h"
#include "modules/parameters.h"
#include "modules/reference.h"

namespace cctune {
namespace {

TEST(EmbeddingTest, LooksUpRowsForAnyIdShape) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    Embedding emb(37, 12);
    auto arena = ValueOrDie(ParameterArena::Create(emb, dtype, Device::Cpu()));
    Generator gen(5);
    ASSERT_TRUE(arena.InitializeRandom(gen).ok());
    const std::vector<int64_t> ids = {0, 36, 5, 5, 17, 2};
    Tensor t = ValueOrDie(Tensor::FromVector(ids, {2, 3}));
    Tensor out = ValueOrDie(emb(t));
    EXPECT_EQ(out.shape(), (Shape{2, 3, 12}));
    const auto table = reference::ToVec(emb.weight());
    const auto got = reference::ToVec(out);
    for (size_t i = 0; i < ids.size(); ++i) {
      for (int64_t d = 0; d < 12; ++d) EXPECT_EQ(got[i * 12 + d], table[ids[i] * 12 + d]);
    }
  }
}

TEST(EmbeddingTest, OutOfRangeIdIsAnError) {
  Embedding emb(4, 3);
  auto arena = ValueOrDie(ParameterArena::Create(emb, DType::kF32, Device::Cpu()));
  Tensor ids = ValueOrDie(Tensor::FromVector(std::vector<int32_t>{1, 4}, {2}));
  auto out = emb(ids);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(std::string(out.status().message()).find("4"), std::string::npos);
}

TEST(EmbeddingTest, ParameterIsNamedWeight) {
  Embedding emb(10, 4);
  ASSERT_EQ(emb.NamedParameters().size(), 1u);
  EXPECT_EQ(emb.NamedParameters()[0].first, "weight");
  EXPECT_EQ(emb.NumParameters(), 40);
}

}  // namespace
}  // namespace cctune
