#include "training/training_components.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "config/config.h"
#include "core/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/decoder_builder.h"
#include "modules/parameters.h"
#include "training/adamw8bit.h"
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

// torchtune's low-memory configs name bitsandbytes' optimizers: the 8-bit ones build AdamW8bit
// (bitsandbytes' defaults: weight_decay 0.01, min_8bit_size 4096), PagedAdamW builds AdamW
// (optim_bits 8: AdamW8bit), and the keys bitsandbytes has but we do not are refused by value.
TEST(TrainingComponentsTest, BitsandbytesAdamWFamily) {
  ASSERT_TRUE(RegisterTrainingComponents().ok());
  std::vector<float> values(5000, 1.0f);
  Tensor p = ValueOrDie(Tensor::FromVector(values, {5000}));
  Tensor g = ValueOrDie(Tensor::FromVector(values, {5000}));
  const std::vector<ParamBuffer> buffers = {{"params", p, g}};
  auto build = [&](const std::string& body) {
    Config config = ValueOrDie(Config::FromString("optimizer:\n" + body, "opt.yaml"));
    return OptimizerRegistry().InstantiateKey(config.root(), "optimizer", buffers);
  };
  for (const char* name : {"PagedAdamW8bit", "AdamW8bit"}) {
    auto opt = build(absl::StrCat("  _component_: bitsandbytes.optim.", name, "\n  lr: 2e-5\n"));
    ASSERT_TRUE(opt.ok()) << opt.status();
    EXPECT_STREQ((*opt)->name(), "adamw8bit");
    EXPECT_EQ((*opt)->lr(), 2e-5);
    const auto* q8 = dynamic_cast<const AdamW8bit*>(opt->get());
    ASSERT_NE(q8, nullptr);
    EXPECT_EQ(q8->options().adamw.weight_decay, 0.01);
    EXPECT_EQ(q8->options().min_8bit_size, 4096);
    EXPECT_TRUE(q8->Quantized(0));
  }
  auto paged = build("  _component_: bitsandbytes.optim.PagedAdamW\n  lr: 1e-5\n");
  ASSERT_TRUE(paged.ok()) << paged.status();
  EXPECT_STREQ((*paged)->name(), "adamw");
  auto bits8 = build("  _component_: bitsandbytes.optim.PagedAdamW\n  optim_bits: 8\n");
  ASSERT_TRUE(bits8.ok()) << bits8.status();
  EXPECT_STREQ((*bits8)->name(), "adamw8bit");
  auto clip = build("  _component_: bitsandbytes.optim.PagedAdamW8bit\n  percentile_clipping: 5\n");
  EXPECT_EQ(clip.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(clip.status().message()),
              ::testing::HasSubstr("percentile_clipping: 5"));
  auto bits = build("  _component_: bitsandbytes.optim.AdamW\n  optim_bits: 16\n");
  EXPECT_THAT(std::string(bits.status().message()), ::testing::HasSubstr("optim_bits: 16"));
}

}  // namespace
}  // namespace cctune
