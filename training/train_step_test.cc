// TrainStep on tiny random decoders: the loss falls over 30 AdamW steps on a fixed batch (with
// and without activation checkpointing and clipping), two micro-batches give the same step as
// one batch, the reported norm is the pre-clip global norm and clipping scales to max_norm,
// and bad steps (no labels, non-finite loss) are refused without an update.
#include "training/train_step.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/device_interface.h"
#include "core/random.h"
#include "gtest/gtest.h"
#include "models/decoder_builder.h"
#include "modules/parameters.h"
#include "modules/transformer_decoder.h"
#include "tests/util/float_near.h"
#include "training/decoder_trainer.h"
#include "training/optim.h"

namespace cctune {
namespace {

DecoderConfig TinyConfig(bool tied) {
  DecoderConfig c;
  c.vocab_size = 17;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.embed_dim = 16;
  c.head_dim = 4;
  c.intermediate_dim = 24;
  c.max_seq_len = 16;
  c.tie_word_embeddings = tied;
  return c;
}

struct Model {
  std::unique_ptr<TransformerDecoder> decoder;
  ParameterArena params;
  ParameterArena grads;
  std::unique_ptr<DecoderTrainer> trainer;
};

Model MakeModel(const DecoderConfig& config, uint64_t seed, bool checkpointing = false) {
  Model m;
  m.decoder = ValueOrDie(BuildDecoder(config));
  m.params = ValueOrDie(ParameterArena::Create(*m.decoder, DType::kF32, Device::Cpu()));
  Generator gen(seed);
  CCTUNE_CHECK_OK(m.params.InitializeRandom(gen));
  m.grads = ValueOrDie(
      ParameterArena::Allocate(m.params.layout().WithDType(DType::kF32), Device::Cpu()));
  DecoderTrainerOptions opts;
  opts.activation_checkpointing = checkpointing;
  m.trainer = ValueOrDie(DecoderTrainer::Create(m.decoder.get(), &m.grads, opts));
  return m;
}

// Random sequences; labels are the next token, the last one ignored.
MicroBatch MakeBatch(int64_t b, int64_t s, int64_t v, Generator& gen) {
  std::vector<int64_t> seq(b * (s + 1));
  for (int64_t& t : seq) t = static_cast<int64_t>(gen.UniformInt(v));
  std::vector<int64_t> tokens, labels;
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t i = 0; i < s; ++i) {
      tokens.push_back(seq[bi * (s + 1) + i]);
      labels.push_back(i == s - 1 ? -100 : seq[bi * (s + 1) + i + 1]);
    }
  }
  MicroBatch mb;
  mb.tokens = ValueOrDie(Tensor::FromVector(tokens, {b, s}));
  mb.labels = ValueOrDie(Tensor::FromVector(labels, {b, s}));
  return mb;
}

MicroBatch Rows(const MicroBatch& mb, int64_t b0, int64_t nb) {
  MicroBatch out;
  out.tokens = ValueOrDie(ValueOrDie(mb.tokens.Narrow(0, b0, nb)).Contiguous());
  out.labels = ValueOrDie(ValueOrDie(mb.labels.Narrow(0, b0, nb)).Contiguous());
  return out;
}

std::vector<float> Flat(const ParameterArena& arena) {
  std::vector<float> all;
  for (const Tensor& t : arena.buffers()) {
    const std::vector<float> f = ValueOrDie(t.ToFloatVector());
    all.insert(all.end(), f.begin(), f.end());
  }
  return all;
}

double Norm(const std::vector<float>& x) {
  double s = 0;
  for (float v : x) s += static_cast<double>(v) * v;
  return std::sqrt(s);
}

struct FallCase {
  bool tied, checkpointing;
  double clip;
};

class LossFallsTest : public ::testing::TestWithParam<FallCase> {};

TEST_P(LossFallsTest, ThirtyAdamWStepsOnAFixedBatch) {
  const FallCase fc = GetParam();
  const DecoderConfig config = TinyConfig(fc.tied);
  Model m = MakeModel(config, 5, fc.checkpointing);
  Generator gen(6);
  const MicroBatch batch = MakeBatch(2, 8, config.vocab_size, gen);
  AdamWOptions ao;
  ao.lr = 1e-2;
  auto opt = ValueOrDie(AdamW::Create(ValueOrDie(ArenaParamBuffers(m.params, m.grads)), ao));
  std::vector<double> losses;
  for (int step = 0; step < 30; ++step) {
    const TrainStepResult r = ValueOrDie(TrainStep(*m.trainer, *opt, {batch}, fc.clip));
    EXPECT_EQ(r.num_tokens, 14);
    EXPECT_GT(r.grad_norm, 0);
    losses.push_back(r.loss);
  }
  EXPECT_EQ(opt->step(), 30);
  // Random init: about log(17) = 2.83 at first when untied (a tied N(0, 1) table gives
  // large logits and a much higher start).
  if (!fc.tied) {
    EXPECT_NEAR(losses[0], std::log(17.0), 0.5);
  }
  EXPECT_TRUE(std::isfinite(losses[0]));
  EXPECT_LT(losses[15], losses[0]);
  EXPECT_LT(losses[29], losses[15]);
  EXPECT_LT(losses[29], 0.5 * losses[0]) << "first " << losses[0] << " last " << losses[29];
  std::printf("loss %.4f -> %.4f -> %.4f\n", losses[0], losses[15], losses[29]);
}

INSTANTIATE_TEST_SUITE_P(Tiny, LossFallsTest,
                         ::testing::Values(FallCase{true, false, 0.0}, FallCase{false, true, 1.0},
                                           FallCase{true, true, 0.5}),
                         [](const ::testing::TestParamInfo<FallCase>& info) {
                           const FallCase& c = info.param;
                           return std::string(c.tied ? "tied" : "untied") +
                                  (c.checkpointing ? "_checkpointed" : "") +
                                  (c.clip > 0 ? "_clipped" : "");
                         });

TEST(TrainStepTest, TwoMicroBatchesMakeTheSameStepAsOneBatch) {
  const DecoderConfig config = TinyConfig(true);
  Model a = MakeModel(config, 7), b = MakeModel(config, 7);
  Generator gen(8);
  MicroBatch full = MakeBatch(3, 6, config.vocab_size, gen);
  // Uneven micro-batches: 1 row + 2 rows, with extra ignored labels in the second.
  std::vector<int64_t> labels = ValueOrDie(full.labels.ToInt64Vector());
  labels[7] = labels[8] = -100;
  full.labels = ValueOrDie(Tensor::FromVector(labels, {3, 6}));
  SgdOptions so;
  so.lr = 0.1;
  auto opt_a = ValueOrDie(Sgd::Create(ValueOrDie(ArenaParamBuffers(a.params, a.grads)), so));
  auto opt_b = ValueOrDie(Sgd::Create(ValueOrDie(ArenaParamBuffers(b.params, b.grads)), so));
  const TrainStepResult ra = ValueOrDie(TrainStep(*a.trainer, *opt_a, {full}, 0.0));
  const TrainStepResult rb =
      ValueOrDie(TrainStep(*b.trainer, *opt_b, {Rows(full, 0, 1), Rows(full, 1, 2)}, 0.0));
  EXPECT_EQ(ra.num_tokens, 13);
  EXPECT_EQ(rb.num_tokens, 13);
  EXPECT_NEAR(rb.loss, ra.loss, 1e-6 * ra.loss);
  EXPECT_NEAR(rb.grad_norm, ra.grad_norm, 1e-6 * ra.grad_norm);
  const std::vector<float> pa = Flat(a.params), pb = Flat(b.params);
  const std::vector<float> ga = Flat(a.grads), gb = Flat(b.grads);
  double max_g = 0;
  for (float g : ga) max_g = std::max(max_g, static_cast<double>(std::fabs(g)));
  ASSERT_GT(max_g, 0);
  for (size_t i = 0; i < ga.size(); ++i) ASSERT_NEAR(gb[i], ga[i], 1e-6 * max_g) << i;
  // SGD without momentum or decay: p' = fma(g, -lr, p), one rounding (two without FMA:
  // lr·g is rounded first, by at most lr·|g|·2^-24). So
  //   |pb' - pa'| <= lr·|gb - ga| + ½ulp(pa') + ½ulp(pb') [+ lr·(|ga| + |gb|)·2^-24]
  //              <= lr·|gb - ga| + 1 ulp(max |p'|) + lr·max(|ga|, |gb|)·2^-23.
  // Checked with 2 ULPs (one of headroom): still far below what a real bug moves, e.g. an lr
  // off by 1e-4 in one run, or one micro-batch's gradient scaled by its own token count.
  // The gradients differ by summation order only (checked above); the ULP term is what an
  // absolute 1e-7 missed: at |p| = 1.6 one ULP is 1.19e-7, and a different ISA path that moves
  // g by a few 1e-9 flips the rounding of p'.
  double worst = 0;  // largest |pb - pa| / bound, printed to show the margin
  for (size_t i = 0; i < pa.size(); ++i) {
    const double dg = std::fabs(static_cast<double>(gb[i]) - ga[i]);
    const double g = std::max(std::fabs(ga[i]), std::fabs(gb[i]));
    const double lr = static_cast<float>(so.lr);
    const double extra = lr * dg * (1 + 1e-6) + lr * g * 0x1p-23;
    ASSERT_TRUE(testing::FloatNear(pb[i], pa[i], 0, 2, extra))
        << "parameter " << i << ", |gb - ga| " << dg;
    const double ulp = testing::FloatUlp(std::max(std::fabs(pa[i]), std::fabs(pb[i])));
    worst = std::max(worst, std::fabs(static_cast<double>(pb[i]) - pa[i]) / (ulp + extra));
  }
  std::printf("largest parameter difference: %.2f of its bound\n", worst);
}

// A whole optimizer step (zeroing, two micro-batches, clipping, AdamW) allocates no storage
// once the first step has sized the trainer's workspace.
TEST(TrainStepTest, StepsAfterTheFirstAllocateNothing) {
  for (bool checkpointing : {false, true}) {
    const DecoderConfig config = TinyConfig(/*tied=*/true);
    Model m = MakeModel(config, 13, checkpointing);
    Generator gen(14);
    const MicroBatch full = MakeBatch(4, 6, config.vocab_size, gen);
    const std::vector<MicroBatch> micro = {Rows(full, 0, 2), Rows(full, 2, 2)};
    auto opt = ValueOrDie(AdamW::Create(ValueOrDie(ArenaParamBuffers(m.params, m.grads)), {}));
    ASSERT_TRUE(TrainStep(*m.trainer, *opt, micro, 1.0).ok());
    const int64_t before = GetMemoryStats(Device::Cpu()).total_allocations;
    for (int step = 2; step <= 5; ++step) {
      ASSERT_TRUE(TrainStep(*m.trainer, *opt, micro, 1.0).ok());
    }
    EXPECT_EQ(GetMemoryStats(Device::Cpu()).total_allocations - before, 0)
        << (checkpointing ? "with" : "without") << " activation checkpointing";
  }
}

// A tiny model, a batch and SGD with lr 0: the parameters stay put, so every step sees the
// same gradients.
class FrozenTrainStepTest : public ::testing::Test {
 protected:
  FrozenTrainStepTest() : config_(TinyConfig(false)), m_(MakeModel(config_, 9)) {
    Generator gen(10);
    batch_ = MakeBatch(2, 5, config_.vocab_size, gen);
    SgdOptions so;
    so.lr = 0.0;
    opt_ = ValueOrDie(Sgd::Create(ValueOrDie(ArenaParamBuffers(m_.params, m_.grads)), so));
  }

  const DecoderConfig config_;
  Model m_;
  MicroBatch batch_;
  std::unique_ptr<Sgd> opt_;
};

TEST_F(FrozenTrainStepTest, ReportsThePreClipNormAndClipsToMaxNorm) {
  const TrainStepResult r1 = ValueOrDie(TrainStep(*m_.trainer, *opt_, {batch_}, 0.0));
  const double norm = Norm(Flat(m_.grads));
  EXPECT_NEAR(r1.grad_norm, norm, 1e-9 * norm);
  const double max_norm = 0.25 * norm;
  const TrainStepResult r2 = ValueOrDie(TrainStep(*m_.trainer, *opt_, {batch_}, max_norm));
  EXPECT_EQ(r2.loss, r1.loss);
  EXPECT_NEAR(r2.grad_norm, norm, 1e-9 * norm);
  EXPECT_NEAR(Norm(Flat(m_.grads)), max_norm, 1e-5 * max_norm);
}

// The after-backward hook (a reduce-scatter in the distributed recipes) sees the step's
// gradients before the norm and the update: doubling them doubles the reported norm, and its
// error ends the step with no update.
TEST_F(FrozenTrainStepTest, AfterBackwardHookRunsBeforeTheNormAndTheUpdate) {
  const TrainStepResult plain = ValueOrDie(TrainStep(*m_.trainer, *opt_, {batch_}, 0.0));
  int calls = 0;
  const GradientHook twice = [&](const std::vector<Tensor>& grads) -> absl::Status {
    ++calls;
    for (const Tensor& g : grads) {
      float* p = g.data<float>();
      for (int64_t i = 0; i < g.numel(); ++i) p[i] *= 2.0f;
    }
    return absl::OkStatus();
  };
  const TrainStepResult doubled =
      ValueOrDie(TrainStep(*m_.trainer, *opt_, {batch_}, 0.0, twice));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(doubled.loss, plain.loss);
  EXPECT_NEAR(doubled.grad_norm, 2.0 * plain.grad_norm, 1e-6 * plain.grad_norm);

  const int64_t steps = opt_->step();
  const absl::Status st =
      TrainStep(*m_.trainer, *opt_, {batch_}, 0.0, [](const std::vector<Tensor>&) {
        return absl::UnavailableError("peer gone");
      }).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_EQ(opt_->step(), steps);
}

TEST(TrainStepTest, RefusesStepsWithoutLabelsOrWithNonFiniteLoss) {
  const DecoderConfig config = TinyConfig(true);
  Model m = MakeModel(config, 11);
  auto opt = ValueOrDie(AdamW::Create(ValueOrDie(ArenaParamBuffers(m.params, m.grads)), {}));
  Generator gen(12);
  MicroBatch batch = MakeBatch(1, 4, config.vocab_size, gen);
  MicroBatch none = batch;
  none.labels = ValueOrDie(Tensor::FromVector(std::vector<int64_t>{-100, -100, -100, -100}, {1, 4}));
  absl::Status st = TrainStep(*m.trainer, *opt, {none}, 1.0).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;

  // A NaN weight: the step is refused and nothing is updated.
  Tensor w = ValueOrDie(m.params.Get("norm.scale"));
  w.data<float>()[0] = NAN;
  const std::vector<float> before = Flat(m.params);
  st = TrainStep(*m.trainer, *opt, {batch}, 1.0).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find("non-finite"), std::string::npos) << st;
  EXPECT_EQ(opt->step(), 0);
  const std::vector<float> after = Flat(m.params);
  for (size_t i = 1; i < before.size(); ++i) {
    if (!std::isnan(before[i])) {
      ASSERT_EQ(after[i], before[i]) << i;
    }
  }
}

TEST(TrainStepTest, ArenaParamBuffersChecksThatTheLayoutsLineUp) {
  const DecoderConfig config = TinyConfig(false);
  Model m = MakeModel(config, 13);
  const std::vector<ParamBuffer> bufs = ValueOrDie(ArenaParamBuffers(m.params, m.grads));
  ASSERT_EQ(bufs.size(), 1u);
  EXPECT_EQ(bufs[0].param.numel(), bufs[0].grad.numel());
  // A gradient arena of another model does not line up.
  Model other = MakeModel(TinyConfig(true), 14);
  EXPECT_FALSE(ArenaParamBuffers(m.params, other.grads).ok());
  // bf16 parameters pad to 32 elements and f32 gradients to 16: refused, not misaligned.
  auto dec = ValueOrDie(BuildDecoder(config));
  ParameterArena bf16 = ValueOrDie(ParameterArena::Create(*dec, DType::kBF16, Device::Cpu()));
  const absl::StatusOr<std::vector<ParamBuffer>> r = ArenaParamBuffers(bf16, m.grads);
  bool aligned = true;
  const auto& pe = bf16.layout().entries();
  const auto& ge = m.grads.layout().entries();
  for (size_t k = 0; k < pe.size(); ++k) aligned = aligned && pe[k].offset == ge[k].offset;
  EXPECT_EQ(r.ok(), aligned) << r.status();
}

}  // namespace
}  // namespace cctune
