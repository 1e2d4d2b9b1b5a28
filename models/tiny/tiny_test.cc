#include "models/tiny/tiny.h"

#include "core/random.h"
#include "gtest/gtest.h"
#include "models/model_test_util.h"
#include "modules/parameters.h"

namespace cctune {
namespace {

TEST(TinyTest, DefaultShape) {
  const int64_t per_layer = 64 * 64 * 2 + 64 * 16 * 2 + 160 * 64 * 3 + 64 * 2;
  testing::ExpectModel(TinyLlama(), {256 * 64 * 2 + 2 * per_layer + 64, 2 + 2 * 9 + 1, false, 256,
                                     64, 2, 8, 2, 160});
}

TEST(TinyTest, RunsOnTheCpu) {
  auto m = TinyLlama(/*vocab_size=*/50, 1, 4, 1, 16, 24, 32, /*tie_word_embeddings=*/true);
  ASSERT_TRUE(m.ok());
  auto arena = ParameterArena::Create(**m, DType::kF32, Device::Cpu());
  ASSERT_TRUE(arena.ok());
  Generator gen(1);
  ASSERT_TRUE(arena->InitializeRandom(gen).ok());
  Tensor tokens = ValueOrDie(Tensor::FromVector(std::vector<int64_t>{1, 2, 3, 49}, {2, 2}));
  auto logits = (**m)(tokens);
  ASSERT_TRUE(logits.ok());
  EXPECT_EQ(logits->shape(), (Shape{2, 2, 50}));
  for (float v : ValueOrDie(logits->ToFloatVector())) ASSERT_TRUE(std::isfinite(v));
}

}  // namespace
}  // namespace cctune
