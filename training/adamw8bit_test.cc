#include "training/adamw8bit.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/adamw8bit.h"
#include "models/decoder_builder.h"
#include "modules/parameters.h"
#include "training/decoder_trainer.h"
#include "training/recipe_state.h"
#include "training/train_step.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;

Tensor RandomF32(int64_t n, Generator& gen, double scale = 1.0) {
  Tensor t = ValueOrDie(Tensor::Empty({n}, DType::kF32));
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = static_cast<float>(gen.Normal() * scale);
  return t;
}

const uint8_t* Codes(const Tensor& t) {
  return reinterpret_cast<const uint8_t*>(t.data<int32_t>());
}

// The nearest entry by brute force, in double (ties: the lower index).
int NearestRef(const std::array<float, 256>& map, double x) {
  int best = 0;
  for (int k = 1; k < 256; ++k) {
    if (std::fabs(x - map[k]) < std::fabs(x - map[best])) best = k;
  }
  return best;
}

TEST(DynamicQuantMapTest, HasTheDocumentedShape) {
  for (const bool is_signed : {true, false}) {
    SCOPED_TRACE(is_signed ? "signed" : "unsigned");
    const auto& map = is_signed ? cpu::DynamicQuantMapSigned() : cpu::DynamicQuantMapUnsigned();
    for (int k = 1; k < 256; ++k) ASSERT_LT(map[k - 1], map[k]) << k;
    EXPECT_EQ(map[255], 1.0f);
    EXPECT_EQ(std::count(map.begin(), map.end(), 0.0f), 1);
    const int negatives = static_cast<int>(std::count_if(map.begin(), map.end(),
                                                         [](float x) { return x < 0; }));
    EXPECT_EQ(negatives, is_signed ? 127 : 0);
    // The smallest positive entry: the midpoint of [0.1, 1] (signed, one part) or of
    // [0.1, 0.55] (unsigned, two parts), times 1e-6.
    const float smallest = *std::upper_bound(map.begin(), map.end(), 0.0f);
    EXPECT_FLOAT_EQ(smallest, is_signed ? 0.55e-6f : 0.325e-6f);
    // The largest entry below 1: decade 1e0 split into 64 (128) parts.
    EXPECT_FLOAT_EQ(map[254], is_signed ? 1 - 0.9f / 128 : 1 - 0.9f / 256);
    if (is_signed) {
      for (int k = 0; k < 127; ++k) EXPECT_EQ(map[k], -map[254 - k]) << k;
    }
  }
}

TEST(DynamicQuantMapTest, QuantizeNearestMatchesBruteForce) {
  Generator gen(7);
  const auto& map = cpu::DynamicQuantMapSigned();
  for (int i = 0; i < 20000; ++i) {
    // Values spread over every decade, both signs, and beyond [-1, 1].
    const double mag = std::pow(10.0, -7.5 + 8 * gen.Uniform());
    const float x = static_cast<float>(gen.Uniform() < 0.5 ? -mag : mag);
    ASSERT_EQ(cpu::QuantizeNearest(map, x), NearestRef(map, x)) << x;
  }
  for (int k = 0; k < 256; ++k) EXPECT_EQ(cpu::QuantizeNearest(map, map[k]), k);
}

// One step of the same algorithm in fp64 from the kernel's own state: the new parameters,
// scales and codes it should produce.
struct RefResult {
  std::vector<double> p, m_absmax, v_absmax;
  std::vector<int> m_q, v_q;
};

RefResult RefStep(const std::vector<double>& p0, const std::vector<double>& g,
                  const uint8_t* m_q, const float* m_absmax, const uint8_t* v_q,
                  const float* v_absmax, double lr, double b1, double b2, double eps, double wd,
                  int64_t t) {
  const auto& ms = cpu::DynamicQuantMapSigned();
  const auto& mu = cpu::DynamicQuantMapUnsigned();
  const int64_t n = static_cast<int64_t>(p0.size()), bs = cpu::kAdamW8bitBlock;
  const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
  RefResult r;
  r.p = p0;
  std::vector<double> m(n), v(n);
  for (int64_t i = 0; i < n; ++i) {
    m[i] = b1 * ms[m_q[i]] * m_absmax[i / bs] + (1 - b1) * g[i];
    v[i] = b2 * mu[v_q[i]] * v_absmax[i / bs] + (1 - b2) * g[i] * g[i];
    r.p[i] = p0[i] * (1 - lr * wd) - lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + eps);
  }
  for (int64_t b = 0; b * bs < n; ++b) {
    double am = 0, av = 0;
    for (int64_t i = b * bs; i < std::min(n, (b + 1) * bs); ++i) {
      am = std::max(am, std::fabs(m[i]));
      av = std::max(av, v[i]);
    }
    r.m_absmax.push_back(am);
    r.v_absmax.push_back(av);
    for (int64_t i = b * bs; i < std::min(n, (b + 1) * bs); ++i) {
      r.m_q.push_back(am > 0 ? NearestRef(ms, m[i] / am) : NearestRef(ms, 0));
      r.v_q.push_back(av > 0 ? NearestRef(mu, v[i] / av) : NearestRef(mu, 0));
    }
  }
  return r;
}

TEST(AdamW8bitTest, KernelMatchesFp64ReferenceStepByStep) {
  for (const int64_t n : {1, 255, 256, 1000, 40001}) {
    SCOPED_TRACE(absl::StrCat("n ", n));
    Generator gen(11 + n);
    Tensor p = RandomF32(n, gen, 0.5), g = ValueOrDie(Tensor::Zeros({n}, DType::kF32));
    AdamW8bitOptions o;
    o.adamw.lr = 3e-3;
    o.adamw.weight_decay = 0.1;
    o.min_8bit_size = 0;
    auto opt = ValueOrDie(AdamW8bit::Create({{"w", p, g}}, o));
    ASSERT_TRUE(opt->Quantized(0));
    int64_t code_diffs = 0, codes = 0;
    for (int t = 1; t <= 6; ++t) {
      // Gradients over several orders of magnitude within a block.
      for (int64_t i = 0; i < n; ++i) {
        g.data<float>()[i] = static_cast<float>(gen.Normal() * std::pow(10.0, -3 * gen.Uniform()));
      }
      const OptimizerState before = opt->ExportState();
      std::vector<double> p0(p.data<float>(), p.data<float>() + n);
      std::vector<double> g0(g.data<float>(), g.data<float>() + n);
      const RefResult want = RefStep(
          p0, g0, Codes(before.tensors.at("w.exp_avg_q8")),
          ValueOrDie(before.tensors.at("w.exp_avg_absmax").Clone()).data<float>(),
          Codes(before.tensors.at("w.exp_avg_sq_q8")),
          ValueOrDie(before.tensors.at("w.exp_avg_sq_absmax").Clone()).data<float>(),
          o.adamw.lr, o.adamw.beta1, o.adamw.beta2, o.adamw.eps, o.adamw.weight_decay, t);
      ASSERT_TRUE(opt->Step().ok());
      const OptimizerState after = opt->ExportState();
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_NEAR(p.data<float>()[i], want.p[i], 2e-6 * std::max(1.0, std::fabs(want.p[i])))
            << "step " << t << " p[" << i << "]";
      }
      const float* am = after.tensors.at("w.exp_avg_absmax").data<float>();
      const float* av = after.tensors.at("w.exp_avg_sq_absmax").data<float>();
      for (size_t b = 0; b < want.m_absmax.size(); ++b) {
        ASSERT_NEAR(am[b], want.m_absmax[b], 1e-6 * want.m_absmax[b]) << "m_absmax " << b;
        ASSERT_NEAR(av[b], want.v_absmax[b], 1e-6 * want.v_absmax[b]) << "v_absmax " << b;
      }
      // f32 and fp64 may round a value sitting on a boundary between two codes differently:
      // neighbours only, and rarely.
      const uint8_t* mq = Codes(after.tensors.at("w.exp_avg_q8"));
      const uint8_t* vq = Codes(after.tensors.at("w.exp_avg_sq_q8"));
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_LE(std::abs(mq[i] - want.m_q[i]), 1) << "m_q " << i;
        ASSERT_LE(std::abs(vq[i] - want.v_q[i]), 1) << "v_q " << i;
        code_diffs += (mq[i] != want.m_q[i]) + (vq[i] != want.v_q[i]);
        codes += 2;
      }
    }
    EXPECT_LE(code_diffs, codes / 1000 + 1);
  }
}

TEST(AdamW8bitTest, StateIsAboutTwoBytesPerParameter) {
  Generator gen(1);
  const int64_t n = 100000;
  Tensor p = RandomF32(n, gen), g = ValueOrDie(Tensor::Zeros({n}, DType::kF32));
  auto opt8 = ValueOrDie(AdamW8bit::Create({{"w", p, g}}, {}));
  auto opt32 = ValueOrDie(AdamW::Create({{"w", p, g}}, {}));
  const int64_t blocks = (n + 255) / 256;
  EXPECT_EQ(opt8->StateBytes(), 2 * n + 2 * 4 * blocks);
  EXPECT_EQ(opt32->StateBytes(), 8 * n);
}

TEST(AdamW8bitTest, SmallBuffersKeepF32MomentsAndMatchAdamW) {
  Generator gen(2);
  const int64_t n = 300;
  Tensor p = RandomF32(n, gen), g = RandomF32(n, gen);
  Tensor p2 = ValueOrDie(p.Clone());
  AdamW8bitOptions o;  // min_8bit_size 4096 > n
  auto opt8 = ValueOrDie(AdamW8bit::Create({{"w", p, g}}, o));
  auto opt32 = ValueOrDie(AdamW::Create({{"w", p2, g}}, o.adamw));
  EXPECT_FALSE(opt8->Quantized(0));
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(opt8->Step().ok());
    ASSERT_TRUE(opt32->Step().ok());
  }
  EXPECT_EQ(std::memcmp(p.raw_data(), p2.raw_data(), p.nbytes()), 0);
  EXPECT_EQ(opt8->ExportState().tensors.count("w.exp_avg"), 1u);
}

TEST(AdamW8bitTest, ResultIsIndependentOfThreadCount) {
  const int64_t n = 300000;
  std::vector<Tensor> results;
  for (const int threads : {1, 3}) {
    omp_set_num_threads(threads);
    Generator gen(5);
    Tensor p = RandomF32(n, gen), g = RandomF32(n, gen);
    auto opt = ValueOrDie(AdamW8bit::Create({{"w", p, g}}, {}));
    for (int i = 0; i < 2; ++i) ASSERT_TRUE(opt->Step().ok());
    results.push_back(p);
  }
  omp_set_num_threads(omp_get_num_procs());
  EXPECT_EQ(std::memcmp(results[0].raw_data(), results[1].raw_data(), results[0].nbytes()), 0);
}

// Saved through the recipe state file (the packed codes as i32) and resumed: the same bits as
// an uninterrupted run, for an f32 and a bf16 (master copy) buffer.
TEST(AdamW8bitTest, RecipeStateRoundTripResumesBitIdentically) {
  Generator gen(3);
  const int64_t n1 = 5001, n2 = 4099;
  Tensor a = RandomF32(n1, gen), ga = ValueOrDie(Tensor::Zeros({n1}, DType::kF32));
  Tensor b = ValueOrDie(RandomF32(n2, gen).To(DType::kBF16));
  Tensor gb = ValueOrDie(Tensor::Zeros({n2}, DType::kF32));
  auto make = [](Tensor pa, Tensor pga, Tensor pb, Tensor pgb) {
    AdamW8bitOptions o;
    o.adamw.lr = 0.01;
    return ValueOrDie(AdamW8bit::Create({{"f32", pa, pga}, {"bf16", pb, pgb}}, o));
  };
  auto opt = make(a, ga, b, gb);
  std::vector<Tensor> grads_a, grads_b;
  for (int i = 0; i < 6; ++i) {
    grads_a.push_back(RandomF32(n1, gen));
    grads_b.push_back(RandomF32(n2, gen));
  }
  auto step = [&](Optimizer& o, Tensor& pga, Tensor& pgb, int i) {
    ASSERT_TRUE(pga.CopyFrom(grads_a[i]).ok());
    ASSERT_TRUE(pgb.CopyFrom(grads_b[i]).ok());
    ASSERT_TRUE(o.Step().ok());
  };
  for (int i = 0; i < 3; ++i) step(*opt, ga, gb, i);

  const std::string path = ::testing::TempDir() + "/adamw8bit_state.safetensors";
  RecipeState state;
  SetOptimizerState(opt->ExportState(), &state);
  ASSERT_TRUE(SaveRecipeState(path, state).ok());
  RecipeState loaded = ValueOrDie(LoadRecipeState(path));
  OptimizerState saved = ValueOrDie(GetOptimizerState(loaded));
  EXPECT_EQ(saved.tensors.at("f32.exp_avg_q8").dtype(), DType::kI32);

  Tensor a2 = ValueOrDie(a.Clone()), b2 = ValueOrDie(b.Clone());
  Tensor ga2 = ValueOrDie(Tensor::Zeros({n1}, DType::kF32));
  Tensor gb2 = ValueOrDie(Tensor::Zeros({n2}, DType::kF32));
  auto resumed = make(a2, ga2, b2, gb2);
  ASSERT_TRUE(resumed->ImportState(saved).ok());
  EXPECT_EQ(resumed->step(), 3);
  for (int i = 3; i < 6; ++i) {
    step(*opt, ga, gb, i);
    step(*resumed, ga2, gb2, i);
  }
  EXPECT_EQ(std::memcmp(a.raw_data(), a2.raw_data(), a.nbytes()), 0);
  EXPECT_EQ(std::memcmp(b.raw_data(), b2.raw_data(), b.nbytes()), 0);

  // Codes saved as f32 (or of another size) are refused, naming the tensor.
  OptimizerState bad = saved;
  bad.tensors["f32.exp_avg_q8"] = ValueOrDie(saved.tensors.at("f32.exp_avg_q8").To(DType::kF32));
  absl::Status s = resumed->ImportState(bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("f32.exp_avg_q8"));
  // AdamW's state is not AdamW8bit's.
  OptimizerState other = saved;
  other.name = "adamw";
  EXPECT_FALSE(resumed->ImportState(other).ok());
}

TEST(AdamW8bitTest, CreateRejectsBadArguments) {
  Generator gen(4);
  Tensor p = RandomF32(10, gen), g = RandomF32(10, gen);
  AdamW8bitOptions o;
  o.min_8bit_size = -1;
  absl::StatusOr<std::unique_ptr<AdamW8bit>> bad = AdamW8bit::Create({{"w", p, g}}, o);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("min_8bit_size (-1)"));
  o = {};
  o.adamw.beta2 = 1.0;
  bad = AdamW8bit::Create({{"w", p, g}}, o);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("beta2 (1)"));
}

// A tiny decoder trained on one fixed batch with AdamW and with AdamW8bit (8-bit state for
// the whole arena): the 8-bit loss curve stays within 5% of f32 AdamW's at every step.
TEST(AdamW8bitTest, TinyDecoderLossCurveTracksF32AdamW) {
  DecoderConfig c;
  c.vocab_size = 48;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.embed_dim = 32;
  c.head_dim = 8;
  c.intermediate_dim = 64;
  c.max_seq_len = 32;
  Generator data_gen(9);
  std::vector<int64_t> ids, labels;
  for (int i = 0; i < 4 * 16; ++i) ids.push_back(static_cast<int64_t>(data_gen.UniformInt(48)));
  for (int i = 0; i < 4 * 16; ++i) {
    labels.push_back(i % 16 == 15 ? -100 : ids[i + 1]);
  }
  MicroBatch batch{ValueOrDie(Tensor::FromVector(ids, {4, 16})),
                   ValueOrDie(Tensor::FromVector(labels, {4, 16})), Tensor(), Tensor()};
  auto curve = [&](bool eight_bit) {
    std::unique_ptr<TransformerDecoder> model = ValueOrDie(BuildDecoder(c));
    ParameterArena params =
        ValueOrDie(ParameterArena::Create(*model, DType::kF32, Device::Cpu()));
    Generator gen(3);
    EXPECT_TRUE(params.InitializeRandom(gen).ok());
    ParameterArena grads = ValueOrDie(
        ParameterArena::Allocate(params.layout().WithDType(DType::kF32), Device::Cpu()));
    auto trainer = ValueOrDie(DecoderTrainer::Create(model.get(), &grads));
    std::vector<ParamBuffer> bufs = ValueOrDie(ArenaParamBuffers(params, grads));
    AdamW8bitOptions o;
    o.adamw.lr = 3e-3;
    o.min_8bit_size = 0;
    std::unique_ptr<Optimizer> opt;
    if (eight_bit) {
      opt = ValueOrDie(AdamW8bit::Create(bufs, o));
    } else {
      opt = ValueOrDie(AdamW::Create(bufs, o.adamw));
    }
    std::vector<double> losses;
    for (int i = 0; i < 60; ++i) {
      losses.push_back(ValueOrDie(TrainStep(*trainer, *opt, {batch}, 0.0)).loss);
    }
    return losses;
  };
  const std::vector<double> f32 = curve(false), q8 = curve(true);
  EXPECT_LT(f32.back(), 0.5 * f32.front());  // it learns
  double worst = 0;
  for (size_t i = 0; i < f32.size(); ++i) {
    worst = std::max(worst, std::fabs(q8[i] - f32[i]) / f32[i]);
  }
  RecordProperty("worst_relative_loss_gap", absl::StrCat(worst));
  std::printf("worst relative loss gap %.4f, final loss f32 %.4f 8-bit %.4f\n", worst,
              f32.back(), q8.back());
  EXPECT_LT(worst, 0.05);  // measured 0.032 (the gap is largest at the end, loss ~0.1)
}

}  // namespace
}  // namespace cctune
