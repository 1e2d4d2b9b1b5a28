// Argmax, TopK and Sample: references written here (stable orders with the documented tie
// rules), generator consumption, determinism, and empirical frequencies against the filtered
// softmax distribution (chi-square bound over many draws).
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <tuple>
#include <vector>

#include "core/random.h"
#include "gtest/gtest.h"
#include "kernels/cpu/op_test_util.h"
#include "kernels/ops.h"

namespace cctune {
namespace {

using testing::EmptyLike;
using testing::Layout;
using testing::Randn;
using testing::Values;
using testing::WithLayout;

// Logits with many ties: small integers, exactly representable in every float dtype.
Tensor TiedLogits(const Shape& shape, DType dt, Generator& gen) {
  std::vector<float> v(NumElements(shape));
  for (float& x : v) x = static_cast<float>(gen.UniformInt(7)) - 3.f;
  return ValueOrDie(Tensor::FromVector(v, shape, dt));
}

// Ids of one row sorted by (value desc, id asc).
std::vector<int64_t> StableOrder(const double* row, int64_t v) {
  std::vector<int64_t> idx(v);
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [row](int64_t a, int64_t b) { return row[a] > row[b]; });
  return idx;
}

class SelectionTest : public ::testing::TestWithParam<std::tuple<DType, Layout>> {};

TEST_P(SelectionTest, ArgmaxTakesTheFirstMaximum) {
  const auto [dt, layout] = GetParam();
  Generator gen(71);
  for (const Shape& s : std::vector<Shape>{{1}, {17}, {3, 17}, {2, 3, 1000}, {4, 1}}) {
    for (bool ties : {false, true}) {
      const Tensor x = WithLayout(ties ? TiedLogits(s, dt, gen) : Randn(s, dt, gen), layout);
      Shape os(s.begin(), s.end() - 1);
      Tensor out = EmptyLike(os, DType::kI64, layout);
      ASSERT_TRUE(ops::Argmax(out, x).ok());
      const auto vx = Values(x);
      const auto got = ValueOrDie(out.ToInt64Vector());
      const int64_t v = s.back();
      for (size_t r = 0; r < got.size(); ++r) {
        EXPECT_EQ(got[r], StableOrder(&vx[r * v], v)[0]) << ShapeToString(s) << " row " << r;
      }
    }
  }
}

TEST_P(SelectionTest, TopKSortedWithLowerIdsFirstOnTies) {
  const auto [dt, layout] = GetParam();
  Generator gen(72);
  for (const Shape& s : std::vector<Shape>{{1}, {17}, {3, 17}, {2, 2, 300}}) {
    const int64_t v = s.back();
    for (int64_t k : {int64_t{1}, std::min<int64_t>(3, v), v}) {
      for (bool ties : {false, true}) {
        const Tensor x = WithLayout(ties ? TiedLogits(s, dt, gen) : Randn(s, dt, gen), layout);
        Shape ks = s;
        ks.back() = k;
        Tensor values = EmptyLike(ks, dt, layout);
        Tensor indices = EmptyLike(ks, DType::kI64, layout);
        ASSERT_TRUE(ops::TopK(values, indices, x, k).ok());
        const auto vx = Values(x), vv = Values(values);
        const auto vi = ValueOrDie(indices.ToInt64Vector());
        for (int64_t r = 0; r < x.numel() / v; ++r) {
          const auto order = StableOrder(&vx[r * v], v);
          for (int64_t j = 0; j < k; ++j) {
            ASSERT_EQ(vi[r * k + j], order[j]) << ShapeToString(s) << " k " << k << " row " << r;
            ASSERT_EQ(vv[r * k + j], vx[r * v + order[j]]);
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, SelectionTest,
                         ::testing::Combine(::testing::ValuesIn(testing::kFloatTypes),
                                            ::testing::ValuesIn(testing::kAllLayouts)),
                         [](const ::testing::TestParamInfo<SelectionTest::ParamType>& info) {
                           return absl::StrCat(DTypeName(std::get<0>(info.param)), "_",
                                               testing::LayoutName(std::get<1>(info.param)));
                         });

TEST(SelectionTest, NanCountsAsLargest) {
  const Tensor x = ValueOrDie(Tensor::FromVector(std::vector<float>{1.f, NAN, 5.f, NAN}, {4}));
  Tensor out = ValueOrDie(Tensor::Empty({}, DType::kI64));
  ASSERT_TRUE(ops::Argmax(out, x).ok());
  EXPECT_EQ(ValueOrDie(out.ToInt64Vector())[0], 1);
  Tensor values = ValueOrDie(Tensor::Empty({3}, DType::kF32));
  Tensor indices = ValueOrDie(Tensor::Empty({3}, DType::kI64));
  ASSERT_TRUE(ops::TopK(values, indices, x, 3).ok());
  EXPECT_EQ(ValueOrDie(indices.ToInt64Vector()), (std::vector<int64_t>{1, 3, 2}));
}

// The distribution Sample documents, in f64: temperature, top_k (ties: lower ids), top_p.
std::vector<double> FilteredDistribution(const std::vector<double>& logits,
                                         const ops::SamplingParams& p) {
  const int64_t v = logits.size();
  std::vector<double> z(v);
  for (int64_t i = 0; i < v; ++i) z[i] = logits[i] / p.temperature;
  auto order = StableOrder(z.data(), v);
  const int64_t k = p.top_k > 0 ? std::min<int64_t>(p.top_k, v) : v;
  order.resize(k);
  std::vector<double> prob(v, 0.0);
  double total = 0;
  for (int64_t id : order) total += prob[id] = std::exp(z[id] - z[order[0]]);
  double cum = 0;
  size_t keep = 0;
  while (keep < order.size()) {
    cum += prob[order[keep]] / total;
    ++keep;
    if (cum >= p.top_p) break;
  }
  std::vector<double> out(v, 0.0);
  double kept = 0;
  for (size_t j = 0; j < keep; ++j) kept += prob[order[j]];
  for (size_t j = 0; j < keep; ++j) out[order[j]] = prob[order[j]] / kept;
  return out;
}

// Draws `rows * calls` samples of one logits row (repeated over the batch) and checks the
// frequencies: no draw outside the support, and a chi-square statistic under a generous bound.
void CheckFrequencies(const std::vector<float>& row, const ops::SamplingParams& params, DType dt,
                      const std::string& what) {
  const int64_t v = row.size(), rows = 500, calls = 40;
  std::vector<float> batch;
  for (int64_t r = 0; r < rows; ++r) batch.insert(batch.end(), row.begin(), row.end());
  // Logits as a transposed view, to exercise strided rows.
  const Tensor logits_t = ValueOrDie(
      ValueOrDie(Tensor::FromVector(batch, {rows, v}, dt)).Transpose(0, 1).value().Contiguous());
  const Tensor logits = ValueOrDie(logits_t.Transpose(0, 1));
  const auto want =
      FilteredDistribution(Values(ValueOrDie(Tensor::FromVector(row, {v}, dt))), params);
  Generator gen(73);
  std::vector<int64_t> counts(v, 0);
  Tensor out = ValueOrDie(Tensor::Empty({rows}, DType::kI64));
  for (int64_t c = 0; c < calls; ++c) {
    ASSERT_TRUE(ops::Sample(out, logits, params, gen).ok()) << what;
    for (int64_t id : ValueOrDie(out.ToInt64Vector())) {
      ASSERT_GE(id, 0);
      ASSERT_LT(id, v);
      ++counts[id];
    }
  }
  EXPECT_EQ(gen.offset(), static_cast<uint64_t>(rows * calls)) << "one Uniform() per row";
  const double n = static_cast<double>(rows * calls);
  double chi2 = 0;
  int support = 0;
  for (int64_t i = 0; i < v; ++i) {
    if (want[i] == 0) {
      EXPECT_EQ(counts[i], 0) << what << ": id " << i << " is outside the kept set";
      continue;
    }
    ++support;
    const double e = n * want[i];
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  // df = support - 1; the bound is far in the tail (p < 1e-6) for df <= 20.
  EXPECT_LT(chi2, 3.0 * (support - 1) + 40) << what << " (support " << support << ")";
}

TEST(SampleTest, FrequenciesMatchTheFilteredSoftmax) {
  Generator gen(74);
  std::vector<float> row(12);
  for (float& x : row) x = static_cast<float>(gen.Normal() * 1.5);
  struct Case {
    float t;
    int64_t k;
    float p;
  } cases[] = {{1.f, 0, 1.f},   {0.7f, 0, 1.f},    {1.3f, 5, 1.f}, {1.f, 0, 0.8f},
               {0.8f, 6, 0.7f}, {2.f, 100, 0.95f}, {1.f, 3, 0.3f}};
  for (DType dt : testing::kFloatTypes) {
    for (const Case& c : cases) {
      ops::SamplingParams p;
      p.temperature = c.t;
      p.top_k = c.k;
      p.top_p = c.p;
      CheckFrequencies(row, p, dt,
                       absl::StrCat(DTypeName(dt), " T=", c.t, " top_k=", c.k, " top_p=", c.p));
    }
  }
}

TEST(SampleTest, TopPKeepsTheSmallestSetReachingP) {
  // Probabilities 0.4, 0.25, 0.15, 0.1, 0.06, 0.04 at shuffled ids: top_p 0.75 keeps the three
  // largest (0.4 + 0.25 < 0.75 <= 0.8), top_p 0.3 only the largest.
  const std::vector<double> probs = {0.06, 0.25, 0.04, 0.4, 0.1, 0.15};
  std::vector<float> row;
  for (double p : probs) row.push_back(static_cast<float>(std::log(p)));
  ops::SamplingParams p;
  p.top_p = 0.75f;
  const auto want = FilteredDistribution(std::vector<double>(row.begin(), row.end()), p);
  EXPECT_NEAR(want[3], 0.4 / 0.8, 1e-6);
  EXPECT_NEAR(want[1], 0.25 / 0.8, 1e-6);
  EXPECT_NEAR(want[5], 0.15 / 0.8, 1e-6);
  EXPECT_EQ(want[0] + want[2] + want[4], 0.0);
  CheckFrequencies(row, p, DType::kF32, "top_p 0.75");
  p.top_p = 0.3f;
  CheckFrequencies(row, p, DType::kF32, "top_p 0.3");
}

TEST(SampleTest, TopKTiesKeepLowerIds) {
  // Logits 1, 3, 3, 3, 0 with top_k 2: ids 1 and 2 are kept, id 3 is not.
  const std::vector<float> row = {1.f, 3.f, 3.f, 3.f, 0.f};
  ops::SamplingParams p;
  p.top_k = 2;
  const auto want = FilteredDistribution(std::vector<double>(row.begin(), row.end()), p);
  EXPECT_EQ(want, (std::vector<double>{0, 0.5, 0.5, 0, 0}));
  CheckFrequencies(row, p, DType::kBF16, "tied top_k");
}

TEST(SampleTest, GreedyAndTopKOneAreArgmax) {
  Generator data(75);
  const Tensor logits = WithLayout(Randn({6, 50}, DType::kBF16, data), Layout::kTransposed);
  Tensor want = ValueOrDie(Tensor::Empty({6}, DType::kI64));
  ASSERT_TRUE(ops::Argmax(want, logits).ok());
  const auto argmax = ValueOrDie(want.ToInt64Vector());
  Generator gen(1);
  Tensor out = ValueOrDie(Tensor::Empty({6}, DType::kI64));
  ops::SamplingParams greedy;
  greedy.temperature = 0.f;
  greedy.top_k = 3;
  ASSERT_TRUE(ops::Sample(out, logits, greedy, gen).ok());
  EXPECT_EQ(ValueOrDie(out.ToInt64Vector()), argmax);
  EXPECT_EQ(gen.offset(), 0u) << "greedy draws nothing";
  ops::SamplingParams top1;
  top1.top_k = 1;
  top1.temperature = 5.f;
  ASSERT_TRUE(ops::Sample(out, logits, top1, gen).ok());
  EXPECT_EQ(ValueOrDie(out.ToInt64Vector()), argmax);
  EXPECT_EQ(gen.offset(), 6u) << "one draw per row";
}

TEST(SampleTest, DeterministicRowOrderAndInverseCdf) {
  struct Case {
    int64_t v;
    float t;
    int64_t k;
    float p;
  } cases[] = {{40, 0.9f, 20, 0.9f},    {3000, 1.f, 0, 0.6f},  {3000, 0.5f, 0, 1.f},
               {3000, 1.5f, 500, 0.8f}, {3000, 2.f, 0, 0.97f}, {3000, 1.f, 2999, 0.99f}};
  Generator data(76);
  for (const Case& c : cases) {
    const int64_t b = 6;
    const Tensor logits = Randn({b, c.v}, DType::kF32, data, 2.0);
    ops::SamplingParams p;
    p.temperature = c.t;
    p.top_k = c.k;
    p.top_p = c.p;
    const std::string what = absl::StrCat("v=", c.v, " T=", c.t, " top_k=", c.k, " top_p=", c.p);
    Generator g1(99), g2(99);
    Tensor a = ValueOrDie(Tensor::Empty({b}, DType::kI64));
    Tensor same = ValueOrDie(Tensor::Empty({b}, DType::kI64));
    ASSERT_TRUE(ops::Sample(a, logits, p, g1).ok());
    ASSERT_TRUE(ops::Sample(same, logits, p, g2).ok());
    EXPECT_EQ(ValueOrDie(a.ToInt64Vector()), ValueOrDie(same.ToInt64Vector())) << what;
    // Row r uses the r-th draw: sampling the rows one by one from the same seed agrees, and
    // each pick is the inverse CDF (kept ids in increasing order) at that draw.
    Generator g3(99), mirror(99);
    const auto batch = ValueOrDie(a.ToInt64Vector());
    const auto vl = Values(logits);
    for (int64_t r = 0; r < b; ++r) {
      const Tensor row = ValueOrDie(logits.Narrow(0, r, 1));
      Tensor one = ValueOrDie(Tensor::Empty({1}, DType::kI64));
      ASSERT_TRUE(ops::Sample(one, row, p, g3).ok());
      EXPECT_EQ(ValueOrDie(one.ToInt64Vector())[0], batch[r]) << what << " row " << r;
      const double u = mirror.Uniform();
      const auto dist = FilteredDistribution(
          std::vector<double>(vl.begin() + r * c.v, vl.begin() + (r + 1) * c.v), p);
      double cum = 0;
      int64_t pick = -1, support = 0;
      for (int64_t i = 0; i < c.v; ++i) {
        support += dist[i] > 0;
        cum += dist[i];
        if (pick < 0 && dist[i] > 0 && cum > u) pick = i;
      }
      EXPECT_EQ(pick, batch[r]) << what << " row " << r << " u " << u << " support " << support;
    }
  }
}

TEST(SampleErrorsTest, MessagesNameTheOffendingValues) {
  Generator gen(77);
  const Tensor logits = Randn({2, 5}, DType::kF32, gen);
  Tensor out = ValueOrDie(Tensor::Empty({2}, DType::kI64));
  ops::SamplingParams p;
  p.temperature = -1.f;
  absl::Status st = ops::Sample(out, logits, p, gen);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("Sample: temperature (-1) must be finite and >= 0"),
            std::string::npos)
      << st;
  p = {};
  p.top_p = 0.f;
  st = ops::Sample(out, logits, p, gen);
  EXPECT_NE(st.message().find("Sample: top_p (0) must be in (0, 1]"), std::string::npos) << st;
  p = {};
  p.top_k = -2;
  st = ops::Sample(out, logits, p, gen);
  EXPECT_NE(st.message().find("Sample: top_k (-2) must be >= 0"), std::string::npos) << st;
  const Tensor flat = Randn({5}, DType::kF32, gen);
  st = ops::Sample(out, flat, {}, gen);
  EXPECT_NE(st.message().find("Sample: logits has shape [5] (1-d); expected 2-d [b, v]"),
            std::string::npos)
      << st;
  const Tensor masked = ValueOrDie(Tensor::Full({2, 5}, -INFINITY, DType::kF32));
  st = ops::Sample(out, masked, {}, gen);
  EXPECT_NE(st.message().find("Sample: row 0 of logits [2, 5] has a NaN or no finite logit"),
            std::string::npos)
      << st;

  Tensor values = ValueOrDie(Tensor::Empty({2, 6}, DType::kF32));
  Tensor indices = ValueOrDie(Tensor::Empty({2, 6}, DType::kI64));
  st = ops::TopK(values, indices, logits, 6);
  EXPECT_NE(st.message().find("TopK: k (6) must be in [1, v = 5]"), std::string::npos) << st;
  st = ops::TopK(values, indices, logits, 0);
  EXPECT_NE(st.message().find("TopK: k (0) must be in [1, v = 5]"), std::string::npos) << st;
  Tensor f_out = ValueOrDie(Tensor::Empty({2}, DType::kF32));
  st = ops::Argmax(f_out, logits);
  EXPECT_NE(st.message().find("Argmax: out has dtype f32; expected i64"), std::string::npos) << st;
}

}  // namespace
}  // namespace cctune
