#include "training/optim.h"

#include <omp.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "checkpoint/safetensors.h"
#include "core/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;

Tensor RandomF32(int64_t n, Generator& gen, double scale = 1.0) {
  Tensor t = ValueOrDie(Tensor::Empty({n}, DType::kF32));
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = static_cast<float>(gen.Normal() * scale);
  return t;
}

std::vector<double> ToDoubles(const Tensor& t) { return ValueOrDie(t.ToDoubleVector()); }

// Straightforward fp64 AdamW, as torch documents it.
struct RefAdamW {
  std::vector<double> p, m, v;
  double beta1, beta2, eps, wd;
  int64_t t = 0;
  void Step(const std::vector<double>& g, double lr) {
    ++t;
    const double bc1 = 1 - std::pow(beta1, t), bc2 = 1 - std::pow(beta2, t);
    for (size_t i = 0; i < p.size(); ++i) {
      p[i] *= 1 - lr * wd;
      m[i] = beta1 * m[i] + (1 - beta1) * g[i];
      v[i] = beta2 * v[i] + (1 - beta2) * g[i] * g[i];
      const double denom = std::sqrt(v[i]) / std::sqrt(bc2) + eps;
      p[i] -= lr * m[i] / bc1 / denom;
    }
  }
};

// Straightforward fp64 SGD, as torch documents it.
struct RefSgd {
  std::vector<double> p, buf;
  double momentum, dampening, wd;
  bool nesterov;
  int64_t t = 0;
  void Step(const std::vector<double>& g, double lr) {
    for (size_t i = 0; i < p.size(); ++i) {
      double d = g[i] + wd * p[i];
      if (momentum != 0) {
        buf[i] = t == 0 ? d : momentum * buf[i] + (1 - dampening) * d;
        d = nesterov ? d + momentum * buf[i] : buf[i];
      }
      p[i] -= lr * d;
    }
    ++t;
  }
};

void ExpectNear(const std::vector<double>& got, const std::vector<double>& want, double rel,
                double abs_floor, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], rel * std::max(std::fabs(want[i]), abs_floor))
        << what << " [" << i << "]";
  }
}

TEST(AdamWTest, MatchesFp64ReferenceOnSeveralSizes) {
  // beta1 < 0.5 takes torch's other lerp formula.
  for (const double beta1 : {0.85, 0.3}) {
    for (int64_t n : {1, 7, 1000, 70001}) {
      SCOPED_TRACE(absl::StrCat("beta1 ", beta1, " n ", n));
      Generator gen(100 + n);
      Tensor p = RandomF32(n, gen);
      Tensor g = ValueOrDie(Tensor::Zeros({n}, DType::kF32));
      AdamWOptions o;
      o.lr = 1e-2;
      o.beta1 = beta1;
      o.beta2 = 0.98;
      o.eps = 1e-6;
      o.weight_decay = 0.05;
      auto opt = AdamW::Create({{"params", p, g}}, o);
      ASSERT_TRUE(opt.ok()) << opt.status();
      RefAdamW ref{ToDoubles(p), std::vector<double>(n), std::vector<double>(n), o.beta1, o.beta2,
                   o.eps,        o.weight_decay};
      const double lrs[] = {1e-2, 3e-3, 0.0, 2e-2};
      for (int step = 0; step < 4; ++step) {
        Tensor fresh = RandomF32(n, gen, step == 1 ? 1e-3 : 1.0);
        ASSERT_TRUE(g.CopyFrom(fresh).ok());
        (*opt)->set_lr(lrs[step]);
        ASSERT_TRUE((*opt)->Step().ok());
        ref.Step(ToDoubles(g), lrs[step]);
      }
      EXPECT_EQ((*opt)->step(), 4);
      ExpectNear(ToDoubles(p), ref.p, 1e-5, 1e-2, "param");
      const OptimizerState s = (*opt)->ExportState();
      ExpectNear(ToDoubles(s.tensors.at("params.exp_avg")), ref.m, 1e-5, 1e-1, "exp_avg");
      ExpectNear(ToDoubles(s.tensors.at("params.exp_avg_sq")), ref.v, 1e-5, 1e-2, "exp_avg_sq");
    }
  }
}

TEST(SgdTest, MatchesFp64ReferenceForEachVariant) {
  struct Case {
    double momentum, dampening, wd;
    bool nesterov;
  };
  for (const Case& c : {Case{0, 0, 0, false}, Case{0, 0, 0.1, false}, Case{0.9, 0, 0, false},
                        Case{0.9, 0, 0.01, true}, Case{0.7, 0.2, 0.05, false}}) {
    for (int64_t n : {3, 513, 40000}) {
      SCOPED_TRACE(absl::StrCat("momentum ", c.momentum, " nesterov ", c.nesterov, " n ", n));
      Generator gen(7 + n);
      Tensor p = RandomF32(n, gen);
      Tensor g = ValueOrDie(Tensor::Zeros({n}, DType::kF32));
      SgdOptions o;
      o.lr = 0.05;
      o.momentum = c.momentum;
      o.dampening = c.dampening;
      o.weight_decay = c.wd;
      o.nesterov = c.nesterov;
      auto opt = Sgd::Create({{"w", p, g}}, o);
      ASSERT_TRUE(opt.ok()) << opt.status();
      RefSgd ref{ToDoubles(p), std::vector<double>(n), c.momentum, c.dampening, c.wd, c.nesterov};
      for (int step = 0; step < 4; ++step) {
        ASSERT_TRUE(g.CopyFrom(RandomF32(n, gen)).ok());
        (*opt)->set_lr(0.05 / (step + 1));
        ASSERT_TRUE((*opt)->Step().ok());
        ref.Step(ToDoubles(g), 0.05 / (step + 1));
      }
      ExpectNear(ToDoubles(p), ref.p, 1e-5, 1e-1, "param");
      const OptimizerState s = (*opt)->ExportState();
      EXPECT_EQ(s.tensors.count("w.momentum_buffer"), c.momentum != 0 ? 1u : 0u);
      if (c.momentum != 0) {
        ExpectNear(ToDoubles(s.tensors.at("w.momentum_buffer")), ref.buf, 1e-5, 1e-1, "buf");
      }
    }
  }
}

// torch.optim.AdamW / SGD, recorded by tools/golden/gen_adamw_golden.py.
class OptimGoldenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto f = SafetensorsFile::Open("training/testdata/optim_golden.safetensors");
    ASSERT_TRUE(f.ok()) << f.status();
    file_ = std::make_unique<SafetensorsFile>(std::move(*f));
    steps_ = std::stoi(file_->metadata().at("steps"));
    for (absl::string_view s : absl::StrSplit(file_->metadata().at("lrs"), ',')) {
      lrs_.push_back(std::stod(std::string(s)));
    }
    ASSERT_EQ(static_cast<int>(lrs_.size()), steps_);
  }
  double Meta(const std::string& key) const { return std::stod(file_->metadata().at(key)); }
  Tensor Row(const std::string& name, int step) const {
    Tensor all = ValueOrDie(file_->Load(name, DType::kF32));
    return ValueOrDie(ValueOrDie(all.Select(0, step)).Clone());
  }
  // torch and this code both run the update in f32, in different orders (vectorised, fused
  // or not: two roundings without FMA, as under --config=scalar), so each step adds a few
  // roundings on each side, each up to half a ULP of an operand, not of the result: an
  // update that cancels (p + lr·d near 0, m·buf + d near 0) leaves errors that are many ULPs
  // of the small result. So the bound is kUlpsPerStep ULPs per step of the operands'
  // magnitude, |ref_t| + |ref_{t-1}| (the old value plus the update), with `floor` as the
  // smallest magnitude. (A flat 1e-6 of |ref| was ~8-16 ULPs whatever the step and the
  // cancellation: native runs came within 5% of it, the scalar build went past it.)
  static constexpr double kUlpsPerStep = 8;
  void ExpectClose(const Tensor& got, const Tensor& want, const std::vector<double>& prev,
                   int step, double floor, const std::string& what) {
    const std::vector<double> a = ToDoubles(got), b = ToDoubles(want);
    ASSERT_EQ(a.size(), b.size()) << what;
    ASSERT_EQ(prev.size(), b.size()) << what;
    const double per_unit = kUlpsPerStep * (step + 1) * 0x1p-24;
    for (size_t i = 0; i < a.size(); ++i) {
      const double mag = std::max(std::fabs(b[i]) + std::fabs(prev[i]), floor);
      const double err = std::fabs(a[i] - b[i]);
      ASSERT_LE(err, per_unit * mag) << what << " [" << i << "]: " << a[i] << " vs " << b[i]
                                     << " (previous " << prev[i] << ")";
      worst_ = std::max(worst_, err / (per_unit * mag));
    }
  }
  void TearDown() override { std::printf("largest error: %.2f of its bound\n", worst_); }

  double worst_ = 0;

  std::unique_ptr<SafetensorsFile> file_;
  int steps_ = 0;
  std::vector<double> lrs_;
};

TEST_F(OptimGoldenTest, AdamWMatchesTorch) {
  Tensor p = ValueOrDie(ValueOrDie(file_->Load("params.init", DType::kF32)).Clone());
  Tensor g = ValueOrDie(Tensor::Zeros(p.shape(), DType::kF32));
  AdamWOptions o;
  o.beta1 = Meta("adamw.beta1");
  o.beta2 = Meta("adamw.beta2");
  o.eps = Meta("adamw.eps");
  o.weight_decay = Meta("adamw.weight_decay");
  auto opt = AdamW::Create({{"params", p, g}}, o);
  ASSERT_TRUE(opt.ok()) << opt.status();
  std::vector<double> prev_p = ToDoubles(p), prev_m(prev_p.size(), 0.0), prev_v = prev_m;
  for (int step = 0; step < steps_; ++step) {
    SCOPED_TRACE(step);
    ASSERT_TRUE(g.CopyFrom(Row("grads", step)).ok());
    (*opt)->set_lr(lrs_[step]);
    ASSERT_TRUE((*opt)->Step().ok());
    const OptimizerState s = (*opt)->ExportState();
    const Tensor want_p = Row("adamw.params", step), want_m = Row("adamw.exp_avg", step),
                 want_v = Row("adamw.exp_avg_sq", step);
    ExpectClose(p, want_p, prev_p, step, 1e-3, "params");
    ExpectClose(s.tensors.at("params.exp_avg"), want_m, prev_m, step, 1e-4, "exp_avg");
    ExpectClose(s.tensors.at("params.exp_avg_sq"), want_v, prev_v, step, 1e-8, "exp_avg_sq");
    prev_p = ToDoubles(want_p);
    prev_m = ToDoubles(want_m);
    prev_v = ToDoubles(want_v);
  }
}

TEST_F(OptimGoldenTest, SgdMatchesTorch) {
  for (const std::string name : {"sgd_nesterov", "sgd_damp"}) {
    SCOPED_TRACE(name);
    Tensor p = ValueOrDie(ValueOrDie(file_->Load("params.init", DType::kF32)).Clone());
    Tensor g = ValueOrDie(Tensor::Zeros(p.shape(), DType::kF32));
    SgdOptions o;
    o.momentum = Meta(name + ".momentum");
    o.dampening = Meta(name + ".dampening");
    o.weight_decay = Meta(name + ".weight_decay");
    o.nesterov = Meta(name + ".nesterov") != 0;
    auto opt = Sgd::Create({{"params", p, g}}, o);
    ASSERT_TRUE(opt.ok()) << opt.status();
    std::vector<double> prev_p = ToDoubles(p), prev_buf(prev_p.size(), 0.0);
    for (int step = 0; step < steps_; ++step) {
      SCOPED_TRACE(step);
      ASSERT_TRUE(g.CopyFrom(Row("grads", step)).ok());
      (*opt)->set_lr(lrs_[step]);
      ASSERT_TRUE((*opt)->Step().ok());
      const Tensor want_p = Row(name + ".params", step),
                   want_buf = Row(name + ".momentum_buffer", step);
      ExpectClose(p, want_p, prev_p, step, 1e-3, "params");
      ExpectClose((*opt)->ExportState().tensors.at("params.momentum_buffer"), want_buf,
                  prev_buf, step, 1e-3, "momentum_buffer");
      prev_p = ToDoubles(want_p);
      prev_buf = ToDoubles(want_buf);
    }
  }
}

TEST(AdamWTest, Bf16ParametersUseAnF32MasterCopy) {
  const int64_t n = 4097;
  Generator gen(5);
  Tensor p32 = RandomF32(n, gen);
  Tensor p = ValueOrDie(p32.To(DType::kBF16));
  Tensor g = ValueOrDie(Tensor::Zeros({n}, DType::kF32));
  AdamWOptions o;
  o.lr = 1e-3;  // updates far below bf16's resolution near 1: only the master can track them
  auto opt = AdamW::Create({{"bf16", p, g}}, o);
  ASSERT_TRUE(opt.ok()) << opt.status();
  RefAdamW ref{ToDoubles(p), std::vector<double>(n), std::vector<double>(n), o.beta1, o.beta2,
               o.eps,        o.weight_decay};
  for (int step = 0; step < 5; ++step) {
    ASSERT_TRUE(g.CopyFrom(RandomF32(n, gen)).ok());
    ASSERT_TRUE((*opt)->Step().ok());
    ref.Step(ToDoubles(g), o.lr);
  }
  const OptimizerState s = (*opt)->ExportState();
  ASSERT_EQ(s.tensors.count("bf16.master"), 1u);
  const Tensor master = s.tensors.at("bf16.master");
  ExpectNear(ToDoubles(master), ref.p, 1e-5, 1e-2, "master");
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(p.data<bf16>()[i].bits, FloatToBf16(master.data<float>()[i]).bits) << i;
  }
  // The master moved away from the bf16 grid: the master really holds extra precision.
  int64_t off_grid = 0;
  for (int64_t i = 0; i < n; ++i) {
    off_grid += Bf16ToFloat(p.data<bf16>()[i]) != master.data<float>()[i];
  }
  EXPECT_GT(off_grid, n / 2);
  EXPECT_EQ((*opt)->StateBytes(), 3 * n * 4);
}

// Two buffers (f32 and bf16) stepped together; the result does not depend on the threads.
TEST(OptimTest, ResultIsIndependentOfThreadCount) {
  auto run = [](int threads) {
    omp_set_num_threads(threads);
    Generator gen(77);
    const int64_t n1 = 100003, n2 = 65537;
    Tensor a = RandomF32(n1, gen), ga = RandomF32(n1, gen);
    Tensor b = ValueOrDie(RandomF32(n2, gen).To(DType::kBF16)), gb = RandomF32(n2, gen);
    auto opt = ValueOrDie(AdamW::Create({{"a", a, ga}, {"b", b, gb}}, AdamWOptions()));
    double norm = 0;
    for (int i = 0; i < 3; ++i) {
      norm = ValueOrDie(ClipGradNorm(opt->Grads(), 1.0));
      CCTUNE_CHECK_OK(opt->Step());
    }
    std::vector<double> out = ToDoubles(a);
    const std::vector<double> bb = ToDoubles(b);
    out.insert(out.end(), bb.begin(), bb.end());
    out.push_back(norm);
    return out;
  };
  const int saved = omp_get_max_threads();
  const std::vector<double> one = run(1);
  const std::vector<double> four = run(4);
  const std::vector<double> three = run(3);
  omp_set_num_threads(saved);
  ASSERT_EQ(one.size(), four.size());
  EXPECT_TRUE(std::memcmp(one.data(), four.data(), one.size() * sizeof(double)) == 0);
  EXPECT_TRUE(std::memcmp(one.data(), three.data(), one.size() * sizeof(double)) == 0);
}

// Export after k steps, import into a fresh optimizer over a copy of the parameters, continue:
// bit-identical to the uninterrupted run.
TEST(OptimTest, ExportImportResumesBitIdentically) {
  for (const bool use_sgd : {false, true}) {
    SCOPED_TRACE(use_sgd ? "sgd" : "adamw");
    Generator gen(3);
    const int64_t n1 = 301, n2 = 77;
    Tensor a = RandomF32(n1, gen), ga = ValueOrDie(Tensor::Zeros({n1}, DType::kF32));
    Tensor b = ValueOrDie(RandomF32(n2, gen).To(DType::kBF16));
    Tensor gb = ValueOrDie(Tensor::Zeros({n2}, DType::kF32));
    auto make = [&](Tensor pa, Tensor pga, Tensor pb, Tensor pgb) -> std::unique_ptr<Optimizer> {
      std::vector<ParamBuffer> bufs = {{"f32", pa, pga}, {"bf16", pb, pgb}};
      if (use_sgd) {
        SgdOptions o;
        o.lr = 0.1;
        o.momentum = 0.9;
        o.nesterov = true;
        return ValueOrDie(Sgd::Create(bufs, o));
      }
      AdamWOptions o;
      o.lr = 0.01;
      return ValueOrDie(AdamW::Create(bufs, o));
    };
    std::unique_ptr<Optimizer> opt = make(a, ga, b, gb);
    std::vector<Tensor> grads_a, grads_b;
    for (int i = 0; i < 6; ++i) {
      grads_a.push_back(RandomF32(n1, gen));
      grads_b.push_back(RandomF32(n2, gen));
    }
    auto step = [&](Optimizer& o, Tensor& pga, Tensor& pgb, int i) {
      ASSERT_TRUE(pga.CopyFrom(grads_a[i]).ok());
      ASSERT_TRUE(pgb.CopyFrom(grads_b[i]).ok());
      o.set_lr(0.01 * (i + 1));
      ASSERT_TRUE(o.Step().ok());
    };
    for (int i = 0; i < 3; ++i) step(*opt, ga, gb, i);

    // "Checkpoint": copies of the parameters and of the exported state.
    Tensor a2 = ValueOrDie(a.Clone()), b2 = ValueOrDie(b.Clone());
    Tensor ga2 = ValueOrDie(Tensor::Zeros({n1}, DType::kF32));
    Tensor gb2 = ValueOrDie(Tensor::Zeros({n2}, DType::kF32));
    OptimizerState saved = opt->ExportState();
    for (auto& [name, t] : saved.tensors) t = ValueOrDie(t.Clone());
    // Scramble b2's bf16 copy: import must rewrite it from the master.
    b2.data<bf16>()[0].bits ^= 0x1234;
    std::unique_ptr<Optimizer> resumed = make(a2, ga2, b2, gb2);
    resumed->set_lr(123.0);
    ASSERT_TRUE(resumed->ImportState(saved).ok());
    EXPECT_EQ(resumed->step(), 3);
    EXPECT_EQ(resumed->lr(), opt->lr());
    for (int i = 3; i < 6; ++i) {
      step(*opt, ga, gb, i);
      step(*resumed, ga2, gb2, i);
    }
    EXPECT_TRUE(std::memcmp(a.raw_data(), a2.raw_data(), a.nbytes()) == 0);
    EXPECT_TRUE(std::memcmp(b.raw_data(), b2.raw_data(), b.nbytes()) == 0);
  }
}

TEST(OptimTest, ImportRejectsMismatchedState) {
  Generator gen(1);
  Tensor p = RandomF32(10, gen), g = RandomF32(10, gen);
  auto opt = ValueOrDie(AdamW::Create({{"params", p, g}}, AdamWOptions()));
  const OptimizerState good = opt->ExportState();
  ASSERT_TRUE(opt->ImportState(good).ok());

  OptimizerState s = good;
  s.name = "sgd";
  EXPECT_THAT(std::string(opt->ImportState(s).message()), HasSubstr("'sgd'"));
  s = good;
  s.tensors.erase("params.exp_avg");
  EXPECT_THAT(std::string(opt->ImportState(s).message()), HasSubstr("params.exp_avg"));
  s = good;
  s.tensors["params.exp_avg"] = RandomF32(11, gen);
  EXPECT_THAT(std::string(opt->ImportState(s).message()), HasSubstr("expected 10"));
  s = good;
  s.hyperparameters["momentum"] = 0.9;
  EXPECT_THAT(std::string(opt->ImportState(s).message()), HasSubstr("'momentum'"));
  s = good;
  s.hyperparameters.erase("eps");
  EXPECT_THAT(std::string(opt->ImportState(s).message()), HasSubstr("'eps'"));
  s = good;
  s.hyperparameters["beta2"] = 1.5;
  EXPECT_THAT(std::string(opt->ImportState(s).message()), HasSubstr("beta2 (1.5)"));
  s = good;
  s.step = -1;
  EXPECT_THAT(std::string(opt->ImportState(s).message()), HasSubstr("step (-1)"));
}

TEST(OptimTest, CreateRejectsBadArguments) {
  Generator gen(2);
  Tensor p = RandomF32(10, gen), g = RandomF32(10, gen);
  AdamWOptions o;
  o.beta1 = 1.0;
  EXPECT_THAT(std::string(AdamW::Create({{"p", p, g}}, o).status().message()),
              HasSubstr("beta1 (1)"));
  o = AdamWOptions();
  o.lr = -1;
  EXPECT_THAT(std::string(AdamW::Create({{"p", p, g}}, o).status().message()),
              HasSubstr("lr (-1)"));
  EXPECT_THAT(std::string(AdamW::Create({{"p", p, RandomF32(9, gen)}}, {}).status().message()),
              HasSubstr("param has 10 elements but grad has 9"));
  EXPECT_THAT(std::string(AdamW::Create({{"p", p, g}, {"p", p, g}}, {}).status().message()),
              HasSubstr("appears twice"));
  Tensor m = ValueOrDie(RandomNormal({4, 6}, DType::kF32, gen));
  Tensor strided = ValueOrDie(m.Transpose(0, 1));
  EXPECT_THAT(std::string(AdamW::Create(
                              {{"p", strided, ValueOrDie(Tensor::Zeros({6, 4}, DType::kF32))}}, {})
                              .status()
                              .message()),
              HasSubstr("contiguous"));
  EXPECT_THAT(
      std::string(AdamW::Create({{"p", p, ValueOrDie(g.To(DType::kBF16))}}, {}).status().message()),
      HasSubstr("grad dtype bf16"));
  SgdOptions s;
  s.nesterov = true;
  EXPECT_THAT(std::string(Sgd::Create({{"p", p, g}}, s).status().message()),
              HasSubstr("nesterov needs momentum > 0"));
  // A 2-D parameter is fine (used flat).
  Tensor p2 = ValueOrDie(RandomNormal({3, 5}, DType::kF32, gen));
  Tensor g2 = ValueOrDie(RandomNormal({3, 5}, DType::kF32, gen));
  EXPECT_TRUE(Sgd::Create({{"p", p2, g2}}, SgdOptions()).ok());
}

TEST(OptimTest, ZeroGradClearsEveryBuffer) {
  Generator gen(4);
  Tensor p = RandomF32(70000, gen), g = RandomF32(70000, gen);
  Tensor q = RandomF32(5, gen), h = RandomF32(5, gen);
  auto opt = ValueOrDie(Sgd::Create({{"a", p, g}, {"b", q, h}}, SgdOptions()));
  ASSERT_TRUE(opt->ZeroGrad().ok());
  for (double x : ToDoubles(g)) ASSERT_EQ(x, 0.0);
  for (double x : ToDoubles(h)) ASSERT_EQ(x, 0.0);
}

TEST(ClipGradNormTest, MatchesFp64NormAndScalesOnlyAboveMax) {
  for (int64_t n : {1, 17, 50000}) {
    SCOPED_TRACE(n);
    Generator gen(n);
    std::vector<Tensor> grads = {RandomF32(n, gen), RandomF32(3, gen, 10.0), RandomF32(n, gen)};
    double ref = 0;
    std::vector<std::vector<double>> before;
    for (const Tensor& t : grads) {
      before.push_back(ToDoubles(t));
      for (double x : before.back()) ref += x * x;
    }
    ref = std::sqrt(ref);
    // Above the norm: nothing changes.
    auto norm = ClipGradNorm(grads, ref * 2);
    ASSERT_TRUE(norm.ok());
    EXPECT_NEAR(*norm, ref, 1e-12 * ref);
    for (size_t i = 0; i < grads.size(); ++i) EXPECT_EQ(ToDoubles(grads[i]), before[i]);
    // Below: scaled by max_norm / (norm + 1e-6).
    const double max_norm = ref / 4;
    norm = ClipGradNorm(grads, max_norm);
    ASSERT_TRUE(norm.ok());
    EXPECT_NEAR(*norm, ref, 1e-12 * ref);
    const double coef = max_norm / (ref + 1e-6);
    for (size_t i = 0; i < grads.size(); ++i) {
      std::vector<double> want = before[i];
      for (double& x : want) x *= coef;
      ExpectNear(ToDoubles(grads[i]), want, 1e-6, 1e-3, "clipped");
    }
    EXPECT_NEAR(ValueOrDie(GradNorm(grads)), max_norm, 1e-5 * max_norm);
  }
}

TEST(ClipGradNormTest, NonFiniteNormIsReturnedAndGradientsKept) {
  Generator gen(9);
  Tensor g = RandomF32(100, gen);
  g.data<float>()[17] = INFINITY;
  const std::vector<double> before = ToDoubles(g);
  auto norm = ClipGradNorm({g}, 1.0);
  ASSERT_TRUE(norm.ok());
  EXPECT_TRUE(std::isinf(*norm));
  EXPECT_EQ(ToDoubles(g), before);
  g.data<float>()[17] = NAN;
  EXPECT_TRUE(std::isnan(ValueOrDie(ClipGradNorm({g}, 1.0))));
  EXPECT_FALSE(ClipGradNorm({g}, 0.0).ok());
  Tensor bad = ValueOrDie(g.To(DType::kBF16));
  EXPECT_THAT(std::string(GradNorm({bad}).status().message()), HasSubstr("f32"));
}

}  // namespace
}  // namespace cctune
