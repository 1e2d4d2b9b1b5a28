#include "recipes/training_components.h"

#include <set>
#include <string>
#include <vector>

#include "config/config.h"
#include "data/byte_tokenizer.h"
#include "data/dataset_components.h"
#include "gtest/gtest.h"
#include "recipes/tokenizer_components.h"

namespace cctune {
namespace {

TEST(SyntheticArithmeticTest, TextIsCorrectDeterministicAndSeeded) {
  std::set<std::string> seen;
  for (int64_t i = 0; i < 200; ++i) {
    auto [prompt, answer] = SyntheticArithmeticText(7, i, 2);
    auto again = SyntheticArithmeticText(7, i, 2);
    EXPECT_EQ(prompt, again.first);
    EXPECT_EQ(answer, again.second);
    // Independent check: parse "a+b=" and add.
    const size_t plus = prompt.find('+');
    ASSERT_NE(plus, std::string::npos) << prompt;
    ASSERT_EQ(prompt.back(), '=') << prompt;
    const long a = std::stol(prompt.substr(0, plus));
    const long b = std::stol(prompt.substr(plus + 1, prompt.size() - plus - 2));
    EXPECT_GE(a, 0);
    EXPECT_LT(a, 100);
    EXPECT_LT(b, 100);
    EXPECT_EQ(std::stol(answer), a + b) << prompt;
    seen.insert(prompt);
  }
  EXPECT_GT(seen.size(), 150u);  // not a constant stream
  int differ = 0;
  for (int64_t i = 0; i < 20; ++i) {
    differ += SyntheticArithmeticText(7, i, 2).first != SyntheticArithmeticText(8, i, 2).first;
  }
  EXPECT_GT(differ, 10);
}

TEST(SyntheticArithmeticTest, DatasetMasksThePrompt) {
  ASSERT_TRUE(RegisterTrainingComponents().ok());
  auto config = Config::FromString(
      "dataset:\n  _component_: cctune.data.synthetic_arithmetic\n  num_samples: 5\n"
      "  seed: 3\n");
  ASSERT_TRUE(config.ok()) << config.status();
  ByteTokenizer tok;
  DatasetContext ctx;
  ctx.tokenizer = &tok;
  auto ds = DatasetRegistry().InstantiateKey(config->root(), "dataset", ctx);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_EQ((*ds)->size(), 5);
  for (int64_t i = 0; i < 5; ++i) {
    auto [prompt, answer] = SyntheticArithmeticText(3, i, 2);
    const Sample& s = (**ds)[i];
    ASSERT_EQ(s.tokens.size(), 1 + prompt.size() + answer.size() + 1);
    EXPECT_EQ(s.tokens.front(), ByteTokenizer::kBos);
    EXPECT_EQ(s.tokens.back(), ByteTokenizer::kEos);
    for (size_t t = 0; t < s.tokens.size(); ++t) {
      if (t < 1 + prompt.size()) {
        EXPECT_EQ(s.labels[t], kIgnoreIndex);
      } else {
        EXPECT_EQ(s.labels[t], s.tokens[t]);
      }
    }
  }
}

TEST(TrainingComponentsTest, TorchSpellingsResolve) {
  ASSERT_TRUE(RegisterTrainingComponents().ok());
  EXPECT_TRUE(OptimizerRegistry().Contains("torch.optim.AdamW"));
  EXPECT_TRUE(OptimizerRegistry().Contains("torch.optim.SGD"));
  EXPECT_TRUE(
      LrSchedulerRegistry().Contains("torchtune.training.lr_schedulers.get_cosine_schedule_with_warmup"));
  EXPECT_TRUE(LossRegistry().Contains("torchtune.modules.loss.CEWithChunkedOutputLoss"));
  EXPECT_TRUE(TokenizerRegistry().Contains("cctune.data.byte_tokenizer"));
  EXPECT_FALSE(OptimizerRegistry().Contains("torch.optim.Adam"));
}

}  // namespace
}  // namespace cctune
