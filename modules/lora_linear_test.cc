#include "modules/lora_linear.h"

#include <cmath>
#include <string>
#include <vector>

#include "core/random.h"
#include "core/status.h"
#include "gtest/gtest.h"
#include "modules/parameters.h"

namespace cctune {
namespace {

std::vector<double> D(const Tensor& t) { return ValueOrDie(t.ToDoubleVector()); }

// fp64 reference: x·Wᵀ + b + s·(x·Aᵀ)·Bᵀ for x [n, in].
std::vector<double> Reference(const std::vector<double>& x, int64_t n, int64_t in, int64_t out,
                              int64_t r, const std::vector<double>& w,
                              const std::vector<double>& b, const std::vector<double>& a,
                              const std::vector<double>& bb, double s) {
  std::vector<double> y(n * out);
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> u(r, 0.0);
    for (int64_t k = 0; k < r; ++k)
      for (int64_t j = 0; j < in; ++j) u[k] += a[k * in + j] * x[i * in + j];
    for (int64_t o = 0; o < out; ++o) {
      double acc = b.empty() ? 0.0 : b[o];
      for (int64_t j = 0; j < in; ++j) acc += w[o * in + j] * x[i * in + j];
      for (int64_t k = 0; k < r; ++k) acc += s * bb[o * r + k] * u[k];
      y[i * out + o] = acc;
    }
  }
  return y;
}

double MaxAbsDiff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0.0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

TEST(LoRALinearTest, NamesShapesAndInit) {
  LoRALinear lin(12, 7, 4, 8.0, 0.0, /*use_bias=*/true);
  std::vector<std::string> names;
  for (const auto& [name, p] : lin.NamedParameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"weight", "bias", "lora_a.weight", "lora_b.weight"}));
  EXPECT_EQ(lin.NumParameters(), 12 * 7 + 7 + LoRAAdapterNumParameters(12, 7, 4));
  EXPECT_DOUBLE_EQ(lin.scale(), 2.0);
  auto arena = ValueOrDie(ParameterArena::Create(lin, DType::kF32, Device::Cpu()));
  Generator gen(5);
  ASSERT_TRUE(arena.InitializeRandom(gen).ok());
  EXPECT_EQ(lin.lora_a().weight().shape(), (Shape{4, 12}));
  EXPECT_EQ(lin.lora_b().weight().shape(), (Shape{7, 4}));
  for (double v : D(lin.lora_b().weight())) EXPECT_EQ(v, 0.0);
  const double bound = 1.0 / std::sqrt(12.0);
  double max_abs = 0.0;
  for (double v : D(lin.lora_a().weight())) max_abs = std::max(max_abs, std::fabs(v));
  EXPECT_LE(max_abs, bound);
  EXPECT_GT(max_abs, 0.5 * bound);
}

struct Case {
  int64_t n, in, out, rank;
  double alpha;
  bool bias;
  bool transposed_input;
};

class LoRALinearForwardTest : public ::testing::TestWithParam<Case> {};

TEST_P(LoRALinearForwardTest, MatchesFp64ReferenceAndMerges) {
  const Case c = GetParam();
  LoRALinear lin(c.in, c.out, c.rank, c.alpha, 0.0, c.bias);
  auto arena = ValueOrDie(ParameterArena::Create(lin, DType::kF32, Device::Cpu()));
  Generator gen(c.in * 7 + c.out);
  ASSERT_TRUE(arena.InitializeRandom(gen).ok());
  Tensor lb = lin.lora_b().weight();
  ASSERT_TRUE(FillNormal(lb, 0.0, 0.5, gen).ok());  // a trained, non-zero adapter
  Tensor x;
  if (c.transposed_input) {
    Tensor xt = ValueOrDie(RandomNormal({c.in, c.n}, DType::kF32, gen));
    x = ValueOrDie(xt.Transpose(0, 1));
  } else {
    x = ValueOrDie(RandomNormal({c.n, c.in}, DType::kF32, gen));
  }
  const std::vector<double> want =
      Reference(D(ValueOrDie(x.Contiguous())), c.n, c.in, c.out, c.rank, D(lin.weight()),
                c.bias ? D(*lin.bias()) : std::vector<double>{}, D(lin.lora_a().weight()),
                D(lin.lora_b().weight()), c.alpha / c.rank);
  const std::vector<double> got = D(ValueOrDie(lin(x)));
  EXPECT_LE(MaxAbsDiff(got, want), 1e-4);

  ASSERT_TRUE(lin.Merge().ok());
  EXPECT_TRUE(lin.merged());
  const std::vector<double> merged = D(ValueOrDie(lin(x)));
  EXPECT_LE(MaxAbsDiff(merged, want), 1e-4);
  EXPECT_LE(MaxAbsDiff(merged, got), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Shapes, LoRALinearForwardTest,
                         ::testing::Values(Case{1, 8, 4, 1, 1.0, false, false},
                                           Case{5, 17, 33, 4, 8.0, true, false},
                                           Case{9, 31, 13, 8, 16.0, false, true},
                                           Case{3, 64, 64, 2, 3.0, true, true}));

TEST(LoRALinearTest, FreshAdapterIsIdentityOnBase) {
  LoRALinear lora(10, 6, 3, 6.0);
  Linear base(10, 6);
  auto a1 = ValueOrDie(ParameterArena::Create(lora, DType::kF32, Device::Cpu()));
  auto a2 = ValueOrDie(ParameterArena::Create(base, DType::kF32, Device::Cpu()));
  Generator gen(11);
  ASSERT_TRUE(a1.InitializeRandom(gen).ok());
  Tensor w = base.weight();
  ASSERT_TRUE(w.CopyFrom(lora.weight()).ok());
  Tensor x = ValueOrDie(RandomNormal({4, 10}, DType::kF32, gen));
  EXPECT_EQ(MaxAbsDiff(D(ValueOrDie(lora(x))), D(ValueOrDie(base(x)))), 0.0);
}

// The training forward: the base path reads x, the adapter x with element i dropped when the
// (offset + i)-th Uniform() of stream `seed` is < p and the rest scaled by 1/(1-p); without
// dropout, or merged, it is Forward.
TEST(LoRALinearTest, ForwardWithAStoreDropsOnlyTheAdaptersInput) {
  const int64_t n = 6, in = 20, out = 9, r = 3;
  const double alpha = 6.0, p = 0.3;
  LoRALinear lin(in, out, r, alpha, p, /*use_bias=*/true);
  auto arena = ValueOrDie(ParameterArena::Create(lin, DType::kF32, Device::Cpu()));
  Generator gen(21);
  ASSERT_TRUE(arena.InitializeRandom(gen).ok());
  Tensor lb = lin.lora_b().weight();
  ASSERT_TRUE(FillNormal(lb, 0.0, 0.5, gen).ok());
  const Tensor x = ValueOrDie(RandomNormal({n, in}, DType::kF32, gen));
  const std::vector<double> xv = D(x);
  const uint64_t seed = 77, offset = 5;
  Generator mask(seed);
  mask.SetState(seed, offset);
  std::vector<double> xd(xv.size());
  int dropped = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    const bool drop = mask.Uniform() < static_cast<float>(p);
    dropped += drop;
    xd[i] = drop ? 0.0 : xv[i] / (1.0 - p);
  }
  EXPECT_GT(dropped, 0);
  const std::vector<double> w = D(lin.weight()), b = D(*lin.bias());
  const std::vector<double> a = D(lin.lora_a().weight()), bb = D(lin.lora_b().weight());
  const std::vector<double> zero_w(w.size(), 0.0), zero_b(b.size(), 0.0);
  // base(x) + adapter(xd): the reference with W = 0 gives the adapter part alone.
  const std::vector<double> zero_bb(bb.size(), 0.0);
  std::vector<double> want = Reference(xv, n, in, out, r, w, b, a, zero_bb, alpha / r);
  const std::vector<double> adapter =
      Reference(xd, n, in, out, r, zero_w, zero_b, a, bb, alpha / r);
  for (size_t i = 0; i < want.size(); ++i) want[i] += adapter[i];
  Tensor got = ValueOrDie(Tensor::Empty({n, out}, DType::kF32));
  ActivationStore store;
  store.SetDropout(&lin, seed, offset);
  ASSERT_TRUE(lin.Forward(got, x, &store, /*row0=*/0).ok());
  EXPECT_LE(MaxAbsDiff(D(got), want), 1e-4);
  const std::vector<double> eval = D(ValueOrDie(lin(x)));
  EXPECT_GT(MaxAbsDiff(D(got), eval), 1e-3);  // the masks matter
  ASSERT_TRUE(lin.Merge().ok());
  ASSERT_TRUE(lin.Forward(got, x, &store, /*row0=*/0).ok());
  EXPECT_EQ(D(got), D(ValueOrDie(lin(x))));  // merged: no adapter left to drop for
}

}  // namespace
}  // namespace cctune
