#include "training/training_components.h"

#include "gtest/gtest.h"

namespace cctune {
namespace {

TEST(TrainingComponentsTest, TorchSpellingsResolve) {
  ASSERT_TRUE(RegisterTrainingComponents().ok());
  EXPECT_TRUE(OptimizerRegistry().Contains("torch.optim.AdamW"));
  EXPECT_TRUE(OptimizerRegistry().Contains("torch.optim.SGD"));
  EXPECT_TRUE(
      LrSchedulerRegistry().Contains("torchtune.training.lr_schedulers.get_cosine_schedule_with_warmup"));
  EXPECT_TRUE(LossRegistry().Contains("torchtune.modules.loss.CEWithChunkedOutputLoss"));
  EXPECT_FALSE(OptimizerRegistry().Contains("torch.optim.Adam"));
}

}  // namespace
}  // namespace cctune
