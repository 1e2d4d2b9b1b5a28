// The optimizer-update ops (AdamWUpdate, SgdUpdate, SquaredNorm) on the CPU backend against
// straightforward fp64 implementations of torch's formulas, over several steps and sizes
// (one element to several of the backend's 2^14-element chunks, odd remainders), plus
// argument validation.
#include <omp.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/op_test_util.h"
#include "kernels/ops.h"

namespace cctune {
namespace {

using ::cctune::testing::ExpectClose;
using ::cctune::testing::Randn;
using ::cctune::testing::Values;
using ::testing::HasSubstr;

const int64_t kSizes[] = {1, 7, 16384, 50001};

Tensor F32(const std::vector<double>& v) {
  std::vector<float> f(v.begin(), v.end());
  return ValueOrDie(Tensor::FromVector(f, {static_cast<int64_t>(f.size())}));
}

// fp64 AdamW as torch documents it, on the f32 values it starts from.
struct RefAdamW {
  std::vector<double> p, m, v;
  void Step(const std::vector<double>& g, const ops::AdamWStep& h) {
    const double bc1 = 1 - std::pow(h.beta1, h.step), bc2 = 1 - std::pow(h.beta2, h.step);
    for (size_t i = 0; i < p.size(); ++i) {
      p[i] *= 1 - h.lr * h.weight_decay;
      m[i] = h.beta1 * m[i] + (1 - h.beta1) * g[i];
      v[i] = h.beta2 * v[i] + (1 - h.beta2) * g[i] * g[i];
      p[i] -= h.lr * m[i] / bc1 / (std::sqrt(v[i]) / std::sqrt(bc2) + h.eps);
    }
  }
};

// fp64 SGD as torch documents it.
struct RefSgd {
  std::vector<double> p, buf;
  void Step(const std::vector<double>& g, const ops::SgdStep& h) {
    for (size_t i = 0; i < p.size(); ++i) {
      double d = g[i] + h.weight_decay * p[i];
      if (h.momentum != 0) {
        buf[i] = h.first ? d : h.momentum * buf[i] + (1 - h.dampening) * d;
        d = h.nesterov ? d + h.momentum * buf[i] : buf[i];
      }
      p[i] -= h.lr * d;
    }
  }
};

// f32 state after a few steps: each step adds a few roundings (2^-24) of the O(1) values
// involved.
constexpr double kRtol = 2e-6;

TEST(AdamWUpdateTest, MatchesFp64ReferenceOverSeveralSteps) {
  for (const int64_t n : kSizes) {
    for (const double beta1 : {0.9, 0.3}) {  // both of torch's lerp formulas
      for (const bool bf16 : {false, true}) {
        const std::string what = absl::StrCat("n=", n, " beta1=", beta1, bf16 ? " bf16" : " f32");
        Generator gen(n + static_cast<int>(beta1 * 10));
        Tensor param = Randn({n}, bf16 ? DType::kBF16 : DType::kF32, gen);
        Tensor master;
        if (bf16) master = ValueOrDie(param.To(DType::kF32));
        Tensor m = ValueOrDie(Tensor::Zeros({n}, DType::kF32));
        Tensor v = ValueOrDie(Tensor::Zeros({n}, DType::kF32));
        RefAdamW ref{Values(param), Values(m), Values(v)};
        ops::AdamWStep h;
        h.lr = 1e-2;
        h.beta1 = beta1;
        h.beta2 = 0.99;
        h.weight_decay = 0.1;
        for (int step = 1; step <= 3; ++step) {
          Tensor g = Randn({n}, DType::kF32, gen, step == 2 ? 1e-3 : 1.0);
          h.step = step;
          ASSERT_TRUE(ops::AdamWUpdate(param, bf16 ? &master : nullptr, m, v, g, h).ok());
          ref.Step(Values(g), h);
          // The parameter moves by about lr per step: compare against that scale.
          ExpectClose(Values(bf16 ? master : param), ref.p, {1e-6}, kRtol, what + " param");
          // The moments mix O(1) terms, whose roundings bound the error of a small result.
          ExpectClose(Values(m), ref.m, {1e-6}, kRtol, what + " exp_avg");
          ExpectClose(Values(v), ref.v, {1e-6}, kRtol, what + " exp_avg_sq");
          if (bf16) {  // the bf16 parameter is exactly the rounding of the master copy
            Tensor rounded = ValueOrDie(master.To(DType::kBF16));
            ASSERT_EQ(std::memcmp(rounded.raw_data(), param.raw_data(), param.nbytes()), 0)
                << what;
          }
        }
      }
    }
  }
}

TEST(SgdUpdateTest, MatchesFp64ReferenceForEachVariant) {
  struct Case {
    double momentum, dampening, weight_decay;
    bool nesterov;
  };
  const Case cases[] = {{0, 0, 0, false},   {0, 0, 0.01, false},  {0.9, 0, 0, false},
                        {0.9, 0.2, 0.01, false}, {0.9, 0, 0.01, true}, {0.5, 0, 0, true}};
  for (const Case& c : cases) {
    for (const int64_t n : kSizes) {
      for (const bool bf16 : {false, true}) {
        const std::string what =
            absl::StrCat("n=", n, " momentum=", c.momentum, " dampening=", c.dampening,
                         " wd=", c.weight_decay, " nesterov=", c.nesterov, bf16 ? " bf16" : "");
        Generator gen(n * 7 + static_cast<int>(c.momentum * 10));
        Tensor param = Randn({n}, bf16 ? DType::kBF16 : DType::kF32, gen);
        Tensor master;
        if (bf16) master = ValueOrDie(param.To(DType::kF32));
        Tensor buf = ValueOrDie(Tensor::Full({n}, 123.0, DType::kF32));  // overwritten first
        RefSgd ref{Values(param), std::vector<double>(n, 0.0)};
        ops::SgdStep h;
        h.lr = 0.05;
        h.momentum = c.momentum;
        h.dampening = c.dampening;
        h.weight_decay = c.weight_decay;
        h.nesterov = c.nesterov;
        for (int step = 0; step < 3; ++step) {
          Tensor g = Randn({n}, DType::kF32, gen);
          h.first = step == 0;
          ASSERT_TRUE(ops::SgdUpdate(param, bf16 ? &master : nullptr,
                                     c.momentum != 0 ? &buf : nullptr, g, h)
                          .ok());
          ref.Step(Values(g), h);
          ExpectClose(Values(bf16 ? master : param), ref.p, {1e-6}, kRtol, what + " param");
          if (c.momentum != 0) ExpectClose(Values(buf), ref.buf, {1e-6}, kRtol, what + " buf");
          if (bf16) {
            Tensor rounded = ValueOrDie(master.To(DType::kBF16));
            ASSERT_EQ(std::memcmp(rounded.raw_data(), param.raw_data(), param.nbytes()), 0)
                << what;
          }
        }
      }
    }
  }
}

TEST(SquaredNormTest, AddsTheFp64SumOfSquares) {
  for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{16384}, int64_t{16385},
                          int64_t{300001}}) {
    Generator gen(n);
    Tensor x = Randn({n}, DType::kF32, gen, 3.0);
    double want = 0.5;
    for (double v : Values(x)) want += v * v;
    double sum = 0.5;  // accumulates into what is there
    ASSERT_TRUE(ops::SquaredNorm(&sum, x).ok());
    // Exact fp64 products; the two summation orders differ by far less than n · 2^-53.
    EXPECT_NEAR(sum, want, 1e-11 * want) << "n=" << n;
  }
  // Any shape (used flat); an empty tensor adds nothing.
  Generator gen(3);
  Tensor x = Randn({5, 3, 7}, DType::kF32, gen);
  double want = 0;
  for (double v : Values(x)) want += v * v;
  double sum = 0;
  ASSERT_TRUE(ops::SquaredNorm(&sum, x).ok());
  EXPECT_NEAR(sum, want, 1e-11 * want);
  Tensor empty = ValueOrDie(Tensor::Empty({0}, DType::kF32));
  ASSERT_TRUE(ops::SquaredNorm(&sum, empty).ok());
  EXPECT_NEAR(sum, want, 1e-11 * want);
}

TEST(SquaredNormTest, SameBitsForAnyThreadCount) {
  Generator gen(11);
  Tensor x = Randn({1000003}, DType::kF32, gen);
  std::vector<double> results;
  for (const int threads : {1, 2, 3, 4}) {
    omp_set_num_threads(threads);
    double sum = 0;
    ASSERT_TRUE(ops::SquaredNorm(&sum, x).ok());
    results.push_back(sum);
  }
  omp_set_num_threads(omp_get_num_procs());
  for (double r : results) EXPECT_EQ(std::memcmp(&r, &results[0], sizeof(double)), 0);
}

TEST(OptimOpsTest, UpdatesAreIndependentOfThreadCount) {
  Generator gen(5);
  const int64_t n = 100003;
  Tensor p0 = Randn({n}, DType::kF32, gen), g = Randn({n}, DType::kF32, gen);
  std::vector<std::vector<float>> results;
  for (const int threads : {1, 4}) {
    omp_set_num_threads(threads);
    Tensor p = ValueOrDie(p0.Clone());
    Tensor m = ValueOrDie(Tensor::Zeros({n}, DType::kF32));
    Tensor v = ValueOrDie(Tensor::Zeros({n}, DType::kF32));
    ASSERT_TRUE(ops::AdamWUpdate(p, nullptr, m, v, g, {}).ok());
    results.push_back(ValueOrDie(p.ToFloatVector()));
  }
  omp_set_num_threads(omp_get_num_procs());
  EXPECT_EQ(std::memcmp(results[0].data(), results[1].data(), n * sizeof(float)), 0);
}

TEST(OptimOpsTest, RejectsBadArguments) {
  auto t = [](int64_t n, DType dt = DType::kF32) { return ValueOrDie(Tensor::Zeros({n}, dt)); };
  Tensor p = t(10), m = t(10), v = t(10), g = t(10);
  auto adamw = [&](Tensor& param, Tensor* master, Tensor& mm, Tensor& vv, const Tensor& gg,
                   ops::AdamWStep h = {}) {
    return std::string(ops::AdamWUpdate(param, master, mm, vv, gg, h).message());
  };
  ops::AdamWStep bad;
  bad.lr = -1;
  EXPECT_THAT(adamw(p, nullptr, m, v, g, bad), HasSubstr("lr (-1) must be >= 0"));
  bad = {};
  bad.beta2 = 1;
  EXPECT_THAT(adamw(p, nullptr, m, v, g, bad), HasSubstr("beta2 (1) must be in [0, 1)"));
  bad = {};
  bad.step = 0;
  EXPECT_THAT(adamw(p, nullptr, m, v, g, bad), HasSubstr("step (0) must be >= 1"));
  Tensor pb = t(10, DType::kBF16);
  EXPECT_THAT(adamw(pb, nullptr, m, v, g), HasSubstr("no f32 master"));
  Tensor master = t(10);
  EXPECT_THAT(adamw(p, &master, m, v, g), HasSubstr("only for bf16 params"));
  Tensor ph = t(10, DType::kF16);
  EXPECT_THAT(adamw(ph, nullptr, m, v, g), HasSubstr("param has dtype f16"));
  Tensor short_v = t(9);
  EXPECT_THAT(adamw(p, nullptr, m, short_v, g),
              HasSubstr("exp_avg_sq has 9 elements ([9] f32) but param has 10"));
  Tensor gb = t(10, DType::kBF16);
  EXPECT_THAT(adamw(p, nullptr, m, v, gb), HasSubstr("grad has dtype bf16; expected f32"));
  Tensor wide = ValueOrDie(Tensor::Zeros({10, 2}, DType::kF32));
  Tensor strided = ValueOrDie(wide.Select(1, 0));
  EXPECT_THAT(adamw(p, nullptr, strided, v, g), HasSubstr("exp_avg [10] f32 must be contiguous"));
  Tensor both = t(20);
  Tensor lo = ValueOrDie(both.Narrow(0, 0, 10)), mid = ValueOrDie(both.Narrow(0, 5, 10));
  EXPECT_THAT(adamw(p, nullptr, lo, mid, g), HasSubstr("exp_avg and exp_avg_sq overlap"));
  EXPECT_THAT(adamw(p, nullptr, m, m, g), HasSubstr("overlap"));
  Tensor hi = ValueOrDie(both.Narrow(0, 10, 10));
  EXPECT_TRUE(ops::AdamWUpdate(p, nullptr, lo, hi, g, {}).ok());  // adjacent is fine
  Tensor undefined;
  EXPECT_THAT(adamw(p, nullptr, m, v, undefined), HasSubstr("grad is an undefined tensor"));

  ops::SgdStep s;
  s.momentum = 0.9;
  EXPECT_THAT(std::string(ops::SgdUpdate(p, nullptr, nullptr, g, s).message()),
              HasSubstr("momentum is 0.9 but no momentum_buffer"));
  s.momentum = 0;
  EXPECT_THAT(std::string(ops::SgdUpdate(p, nullptr, &m, g, s).message()),
              HasSubstr("momentum is 0 but a momentum_buffer"));
  s.nesterov = true;
  EXPECT_THAT(std::string(ops::SgdUpdate(p, nullptr, nullptr, g, s).message()),
              HasSubstr("nesterov needs momentum > 0"));
  s = {};
  s.weight_decay = -1;
  EXPECT_THAT(std::string(ops::SgdUpdate(p, nullptr, nullptr, g, s).message()),
              HasSubstr("weight_decay (-1) must be >= 0"));
  s = {};
  s.momentum = 0.5;
  Tensor short_buf = t(3);
  EXPECT_THAT(std::string(ops::SgdUpdate(p, nullptr, &short_buf, g, s).message()),
              HasSubstr("momentum_buffer has 3 elements"));

  double sum = 0;
  EXPECT_THAT(std::string(ops::SquaredNorm(nullptr, g).message()), HasSubstr("sum is null"));
  EXPECT_THAT(std::string(ops::SquaredNorm(&sum, gb).message()), HasSubstr("x has dtype bf16"));
  EXPECT_THAT(std::string(ops::SquaredNorm(&sum, strided).message()),
              HasSubstr("must be contiguous"));
  EXPECT_EQ(sum, 0);
}

}  // namespace
}  // namespace cctune
