#include "training/optimizer_in_backward.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/decoder_builder.h"
#include "models/lora.h"
#include "modules/parameters.h"
#include "training/decoder_trainer.h"
#include "training/train_step.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;

DecoderConfig TinyConfig(bool tied) {
  DecoderConfig c;
  c.vocab_size = 40;
  c.num_layers = 3;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.embed_dim = 16;
  c.head_dim = 4;
  c.intermediate_dim = 24;
  c.max_seq_len = 16;
  c.tie_word_embeddings = tied;
  return c;
}

std::vector<MicroBatch> Batches(int count) {
  Generator gen(21);
  std::vector<MicroBatch> out;
  for (int k = 0; k < count; ++k) {
    std::vector<int64_t> ids, labels;
    for (int i = 0; i < 2 * 8; ++i) ids.push_back(static_cast<int64_t>(gen.UniformInt(40)));
    for (int i = 0; i < 2 * 8; ++i) labels.push_back(i % 8 == 7 ? -100 : ids[i + 1]);
    out.push_back({ValueOrDie(Tensor::FromVector(ids, {2, 8})),
                   ValueOrDie(Tensor::FromVector(labels, {2, 8})), Tensor(), Tensor()});
  }
  return out;
}

struct TrainRun {
  std::unique_ptr<TransformerDecoder> model;
  ParameterArena params;
  ParameterLayout trainable;
  ParameterArena grads;  // the ordinary path's arena
  std::unique_ptr<DecoderTrainer> trainer;
  std::unique_ptr<Optimizer> opt;
  OptimizerInBackward* in_bwd = nullptr;
};

OptimizerInBackward::Factory AdamWFactory() {
  return [](const std::vector<ParamBuffer>& bufs) -> absl::StatusOr<std::unique_ptr<Optimizer>> {
    AdamWOptions o;
    o.lr = 1e-2;
    o.weight_decay = 0.1;
    CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<AdamW> opt, AdamW::Create(bufs, o));
    return std::unique_ptr<Optimizer>(std::move(opt));
  };
}

// A model with the same initial weights every time; `lora`: adapters on q/v and the output.
TrainRun MakeRun(bool tied, bool lora, DType dtype, bool in_bwd) {
  TrainRun r;
  const DecoderConfig c = TinyConfig(tied);
  if (lora) {
    LoRAOptions lo;
    lo.lora_rank = 2;
    lo.apply_lora_to_mlp = true;
    lo.apply_lora_to_output = !tied;
    r.model = ValueOrDie(BuildLoRADecoder(c, lo));
  } else {
    r.model = ValueOrDie(BuildDecoder(c));
  }
  r.params = ValueOrDie(ParameterArena::Create(*r.model, dtype, Device::Cpu()));
  Generator gen(5);
  EXPECT_TRUE(r.params.InitializeRandom(gen).ok());
  if (lora) {  // nonzero B so the adapters matter from step 1
    for (const auto& [name, t] : r.params.named_tensors()) {
      if (absl::StrContains(name, "lora_b")) {
        Tensor v = t;
        std::vector<float> vals(v.numel());
        for (float& x : vals) x = static_cast<float>(gen.Normal() * 0.1);
        Tensor src = ValueOrDie(Tensor::FromVector(vals, v.shape()));
        EXPECT_TRUE(v.CopyFrom(src).ok());
      }
    }
    r.trainable = ValueOrDie(LoRATrainableLayout(*r.model));
  } else {
    r.trainable = r.params.layout().WithDType(DType::kF32);
  }
  DecoderTrainerOptions to;
  to.frozen_if_missing = lora;
  if (in_bwd) {
    auto opt = ValueOrDie(OptimizerInBackward::Create(*r.model, r.params, r.trainable,
                                                      AdamWFactory()));
    r.trainer = ValueOrDie(DecoderTrainer::Create(r.model.get(), opt->gradients(), to));
    opt->Attach(*r.trainer);
    r.in_bwd = opt.get();
    r.opt = std::move(opt);
  } else {
    r.grads = ValueOrDie(ParameterArena::Allocate(r.trainable, Device::Cpu()));
    r.trainer = ValueOrDie(DecoderTrainer::Create(r.model.get(), &r.grads, to));
    std::vector<ParamBuffer> bufs =
        lora ? ValueOrDie(LoRAParamBuffers(r.params, r.grads))
             : ValueOrDie(ArenaParamBuffers(r.params, r.grads));
    r.opt = ValueOrDie(AdamWFactory()(bufs));
  }
  return r;
}

// The parameters after every step equal the ordinary path's bit for bit (the same gradients
// accumulated in the same order, the same element-wise AdamW), as do the losses and norms.
TEST(OptimizerInBackwardTest, MatchesTheWholeArenaPath) {
  const std::vector<MicroBatch> batches = Batches(4);
  struct Case {
    bool tied, lora;
    DType dtype;
  };
  for (const Case& k : {Case{false, false, DType::kF32}, Case{true, false, DType::kF32},
                        Case{false, true, DType::kF32}, Case{false, false, DType::kBF16}}) {
    SCOPED_TRACE(absl::StrCat("tied ", k.tied, " lora ", k.lora, " ", DTypeName(k.dtype)));
    TrainRun base = MakeRun(k.tied, k.lora, k.dtype, false);
    TrainRun fused = MakeRun(k.tied, k.lora, k.dtype, true);
    for (int step = 0; step < 4; ++step) {
      base.opt->set_lr(1e-2 * (step + 1));
      fused.opt->set_lr(1e-2 * (step + 1));
      TrainStepResult a = ValueOrDie(TrainStep(*base.trainer, *base.opt, {batches[step]}, 0.0));
      TrainStepResult b = ValueOrDie(TrainStep(*fused.trainer, *fused.opt, {batches[step]}, 0.0));
      EXPECT_EQ(a.loss, b.loss) << "step " << step;
      EXPECT_NEAR(a.grad_norm, b.grad_norm, 1e-9 * a.grad_norm) << "step " << step;
    }
    EXPECT_EQ(fused.opt->step(), 4);
    for (size_t i = 0; i < base.params.buffers().size(); ++i) {
      const Tensor& x = base.params.buffers()[i];
      const Tensor& y = fused.params.buffers()[i];
      EXPECT_EQ(std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()), 0) << "buffer " << i;
    }
    // One layer's gradients instead of three (plus output / norm / table); the same state
    // but the arena's alignment padding.
    EXPECT_LT(fused.in_bwd->GradientBytes(), static_cast<int64_t>(base.grads.Bytes()));
    EXPECT_LE(fused.opt->StateBytes(), base.opt->StateBytes());
    EXPECT_GT(fused.opt->StateBytes(), base.opt->StateBytes() * 95 / 100);
  }
}

TEST(OptimizerInBackwardTest, GradientMemoryIsOneLayerPlusTheRest) {
  TrainRun r = MakeRun(false, false, DType::kF32, true);
  const DecoderConfig c = TinyConfig(false);
  const int64_t d = c.embed_dim, h = c.intermediate_dim, v = c.vocab_size;
  const int64_t layer = d * (c.num_heads * c.head_dim) * 2 + d * (c.num_kv_heads * c.head_dim) * 2 +
                        3 * d * h + 2 * d;
  EXPECT_EQ(r.in_bwd->GradientBytes(), 4 * (layer + 2 * v * d + d));
}

TEST(OptimizerInBackwardTest, RefusesClippingAndAccumulationWithTorchtunesMessages) {
  const std::vector<MicroBatch> batches = Batches(2);
  TrainRun r = MakeRun(false, false, DType::kF32, true);
  absl::StatusOr<TrainStepResult> clip = TrainStep(*r.trainer, *r.opt, {batches[0]}, 1.0);
  EXPECT_THAT(std::string(clip.status().message()),
              HasSubstr("Gradient clipping is not supported with optimizer in bwd"));
  absl::StatusOr<TrainStepResult> accum = TrainStep(*r.trainer, *r.opt, batches, 0.0);
  EXPECT_THAT(std::string(accum.status().message()),
              HasSubstr("Gradient accumulation is not supported with optimizer in bwd"));
}

TEST(OptimizerInBackwardTest, ExportImportResumesBitIdentically) {
  const std::vector<MicroBatch> batches = Batches(4);
  TrainRun a = MakeRun(false, false, DType::kBF16, true);
  for (int s = 0; s < 2; ++s) ASSERT_TRUE(TrainStep(*a.trainer, *a.opt, {batches[s]}, 0.0).ok());
  OptimizerState saved = a.opt->ExportState();
  for (auto& [n, t] : saved.tensors) t = ValueOrDie(t.Clone());
  EXPECT_TRUE(saved.tensors.count("layers_1_attn_q_proj_weight.exp_avg"));
  TrainRun b = MakeRun(false, false, DType::kBF16, true);
  for (size_t i = 0; i < a.params.buffers().size(); ++i) {
    Tensor dst = b.params.buffers()[i];  // shares the arena's storage
    ASSERT_TRUE(dst.CopyFrom(a.params.buffers()[i]).ok());
  }
  ASSERT_TRUE(b.opt->ImportState(saved).ok());
  EXPECT_EQ(b.opt->step(), 2);
  for (int s = 2; s < 4; ++s) {
    ASSERT_TRUE(TrainStep(*a.trainer, *a.opt, {batches[s]}, 0.0).ok());
    ASSERT_TRUE(TrainStep(*b.trainer, *b.opt, {batches[s]}, 0.0).ok());
  }
  for (size_t i = 0; i < a.params.buffers().size(); ++i) {
    const Tensor& x = a.params.buffers()[i];
    EXPECT_EQ(std::memcmp(x.raw_data(), b.params.buffers()[i].raw_data(), x.nbytes()), 0);
  }
  // A whole-arena optimizer's state does not fit.
  TrainRun plain = MakeRun(false, false, DType::kBF16, false);
  absl::Status st = b.opt->ImportState(plain.opt->ExportState());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("optimizer_in_bwd"));
}

}  // namespace
}  // namespace cctune
