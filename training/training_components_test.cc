#include "training/training_components.h"

#include <memory>
#include <string>

#include "config/config.h"
#include "core/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/decoder_builder.h"
#include "modules/parameters.h"
#include "training/decoder_trainer.h"

namespace cctune {
namespace {

TEST(TrainingComponentsTest, TorchSpellingsResolve) {
  ASSERT_TRUE(RegisterTrainingComponents().ok());
  EXPECT_TRUE(OptimizerRegistry().Contains("torch.optim.AdamW"));
  EXPECT_TRUE(OptimizerRegistry().Contains("torch.optim.SGD"));
  EXPECT_TRUE(
      LrSchedulerRegistry().Contains("torchtune.training.lr_schedulers.get_cosine_schedule_with_warmup"));
  EXPECT_TRUE(LossRegistry().Contains("torchtune.modules.loss.CEWithChunkedOutputLoss"));
  EXPECT_TRUE(LossRegistry().Contains("torchtune.modules.loss.LinearCrossEntropyLoss"));
  EXPECT_FALSE(OptimizerRegistry().Contains("torch.optim.Adam"));
}

// loss.num_output_chunks reaches the trainer: the output projection runs in that many chunks.
TEST(TrainingComponentsTest, LossNumOutputChunksSetsTheTrainersChunking) {
  ASSERT_TRUE(RegisterTrainingComponents().ok());
  DecoderConfig c;
  c.vocab_size = 17;
  c.num_layers = 1;
  c.num_heads = 2;
  c.num_kv_heads = 1;
  c.embed_dim = 8;
  c.head_dim = 4;
  c.intermediate_dim = 12;
  c.max_seq_len = 16;
  std::unique_ptr<TransformerDecoder> model = ValueOrDie(BuildDecoder(c));
  ParameterArena params = ValueOrDie(ParameterArena::Create(*model, DType::kF32, Device::Cpu()));
  Generator gen(3);
  ASSERT_TRUE(params.InitializeRandom(gen).ok());
  ParameterArena grads = ValueOrDie(
      ParameterArena::Allocate(params.layout().WithDType(DType::kF32), Device::Cpu()));
  std::vector<int64_t> ids;
  for (int i = 0; i < 2 * 6; ++i) ids.push_back(static_cast<int64_t>(gen.UniformInt(17)));
  const Tensor tokens = ValueOrDie(Tensor::FromVector(ids, {2, 6}));

  auto chunks_for = [&](const std::string& yaml) -> absl::StatusOr<int64_t> {
    CCTUNE_ASSIGN_OR_RETURN(Config config, Config::FromString(yaml, "loss.yaml"));
    auto trainer = ValueOrDie(DecoderTrainer::Create(model.get(), &grads));
    CCTUNE_RETURN_IF_ERROR(ApplyLossComponent(config.root(), trainer.get()));
    CCTUNE_RETURN_IF_ERROR(trainer->Loss(tokens, tokens).status());
    return trainer->last_num_output_chunks();
  };
  const std::string chunked = "loss:\n  _component_: torchtune.modules.loss.CEWithChunkedOutputLoss\n";
  EXPECT_EQ(ValueOrDie(chunks_for(chunked + "  num_output_chunks: 4\n")), 4);
  EXPECT_EQ(ValueOrDie(chunks_for(chunked + "  num_output_chunks: 3\n")), 3);
  EXPECT_EQ(ValueOrDie(chunks_for(chunked)), 1);  // 0: 16M logits per chunk, all 12 rows
  EXPECT_EQ(ValueOrDie(chunks_for("loss:\n  _component_: torchtune.modules.loss."
                                  "LinearCrossEntropyLoss\n  num_output_chunks: 4\n")),
            4);
  EXPECT_EQ(ValueOrDie(chunks_for("loss: null\n")), 1);
  EXPECT_EQ(ValueOrDie(chunks_for("seed: 1\n")), 1);
  EXPECT_EQ(ValueOrDie(chunks_for("loss:\n  _component_: torch.nn.CrossEntropyLoss\n"
                                  "  num_output_chunks: 6\n")),
            6);

  absl::StatusOr<int64_t> bad = chunks_for(chunked + "  num_output_chunks: -2\n");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), ::testing::HasSubstr("num_output_chunks"));
  absl::StatusOr<int64_t> index = chunks_for(chunked + "  ignore_index: 0\n");
  EXPECT_EQ(index.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(index.status().message()), ::testing::HasSubstr("ignore_index 0"));
}

// AdamW is always fused: fused: false is refused, true and null build.
TEST(TrainingComponentsTest, AdamWFusedFalseIsUnimplemented) {
  ASSERT_TRUE(RegisterTrainingComponents().ok());
  Tensor p = ValueOrDie(Tensor::FromVector(std::vector<float>{1, 2, 3}, {3}));
  Tensor g = ValueOrDie(Tensor::FromVector(std::vector<float>{0.5, -1, 2}, {3}));
  const std::vector<ParamBuffer> buffers = {{"params", p, g}};
  auto build = [&](const std::string& fused) {
    Config config = ValueOrDie(Config::FromString(
        "optimizer:\n  _component_: torch.optim.AdamW\n  lr: 0.1\n" + fused, "opt.yaml"));
    return OptimizerRegistry().InstantiateKey(config.root(), "optimizer", buffers);
  };
  EXPECT_TRUE(build("").ok());
  EXPECT_TRUE(build("  fused: true\n").ok());
  auto unfused = build("  fused: false\n");
  EXPECT_EQ(unfused.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(unfused.status().message()),
              ::testing::HasSubstr("optimizer.fused: false"));
}

}  // namespace
}  // namespace cctune
