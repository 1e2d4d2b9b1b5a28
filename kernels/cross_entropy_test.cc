// CrossEntropyForward/Backward against an fp64 reference (loss, count, per-row losses,
// softmax - onehot) and fp64 finite differences of the mean loss: ignore_index rows, f32/bf16
// logits, strided views, in place, a vocabulary-sized row, all rows ignored, and errors.
#include <cmath>
#include <tuple>
#include <vector>

#include "core/random.h"
#include "gtest/gtest.h"
#include "kernels/cpu/op_test_util.h"
#include "kernels/ops.h"

namespace cctune {
namespace {

using testing::EmptyLike;
using testing::ExpectClose;
using testing::ExpectGradClose;
using testing::Layout;
using testing::NumericGradient;
using testing::Randn;
using testing::Values;
using testing::WithLayout;

// fp64 per-row losses (0 for ignored rows); returns the sum and sets *count.
double ReferenceLoss(const std::vector<double>& logits, const std::vector<int64_t>& targets,
                     int64_t v, std::vector<double>* rows, int64_t* count) {
  const int64_t n = static_cast<int64_t>(targets.size());
  rows->assign(n, 0.0);
  *count = 0;
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (targets[i] == ops::kIgnoreIndex) continue;
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < v; ++j) mx = std::max(mx, logits[i * v + j]);
    for (int64_t j = 0; j < v; ++j) sum += std::exp(logits[i * v + j] - mx);
    (*rows)[i] = mx + std::log(sum) - logits[i * v + targets[i]];
    total += (*rows)[i];
    ++*count;
  }
  return total;
}

std::vector<int64_t> RandomTargets(int64_t n, int64_t v, Generator& gen) {
  std::vector<int64_t> t(n);
  for (int64_t& x : t) x = gen.Uniform() < 0.25f ? ops::kIgnoreIndex : gen.UniformInt(v);
  t[0] = n > 1 ? ops::kIgnoreIndex : t[0];  // at least one ignored row when n > 1
  if (n > 1) t[n - 1] = gen.UniformInt(v);  // and one valid row
  return t;
}

struct Outputs {
  Tensor loss_sum = ValueOrDie(Tensor::Empty({}, DType::kF32));
  Tensor num_valid = ValueOrDie(Tensor::Empty({}, DType::kI64));
};

class CrossEntropyTest : public ::testing::TestWithParam<std::tuple<DType, Layout>> {};

TEST_P(CrossEntropyTest, MatchesReferenceAndFiniteDifferences) {
  const auto [dt, layout] = GetParam();
  Generator gen(701);
  struct Case {
    int64_t n, v;
  };
  for (const Case& c : {Case{1, 1}, Case{1, 5}, Case{6, 7}, Case{9, 33}, Case{4, 100}}) {
    const std::string what = absl::StrCat("[", c.n, ", ", c.v, "] ", DTypeName(dt));
    const Tensor logits = WithLayout(Randn({c.n, c.v}, dt, gen, 3.0), layout);
    const auto tv = RandomTargets(c.n, c.v, gen);
    const Tensor targets = ValueOrDie(Tensor::FromVector(tv, {c.n}));
    Outputs o;
    Tensor row_loss = EmptyLike({c.n}, DType::kF32, layout);
    ASSERT_TRUE(ops::CrossEntropyForward(o.loss_sum, o.num_valid, &row_loss, logits, targets).ok())
        << what;
    const auto vl = Values(logits);
    std::vector<double> rows;
    int64_t count;
    const double total = ReferenceLoss(vl, tv, c.v, &rows, &count);
    EXPECT_EQ(ValueOrDie(o.num_valid.ToInt64Vector())[0], count) << what;
    ExpectClose(Values(o.loss_sum), {total}, {1e-5 * c.n}, 1e-6, "loss_sum " + what);
    ExpectClose(Values(row_loss), rows, {1e-5}, 1e-6, "row_loss " + what);

    // The gradient of the mean loss: scale = 1 / num_valid.
    const float scale = count > 0 ? 1.0f / count : 0.f;
    Tensor dlogits = WithLayout(Randn({c.n, c.v}, DType::kF32, gen), layout);  // overwritten
    ASSERT_TRUE(ops::CrossEntropyBackward(dlogits, logits, targets, scale).ok()) << what;
    const auto want = NumericGradient(
        [&](const std::vector<double>& p) {
          std::vector<double> r;
          int64_t cnt;
          const double t = ReferenceLoss(p, tv, c.v, &r, &cnt);
          return cnt > 0 ? t / cnt : 0.0;
        },
        vl);
    ExpectGradClose(Values(dlogits), want, 1e-5, "dlogits " + what);
    // Ignored rows are exactly zero.
    const auto got = Values(dlogits);
    for (int64_t i = 0; i < c.n; ++i) {
      if (tv[i] != ops::kIgnoreIndex) continue;
      for (int64_t j = 0; j < c.v; ++j) ASSERT_EQ(got[i * c.v + j], 0.0) << what << " row " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, CrossEntropyTest,
                         ::testing::Combine(::testing::Values(DType::kF32, DType::kBF16),
                                            ::testing::ValuesIn(testing::kAllLayouts)),
                         [](const ::testing::TestParamInfo<CrossEntropyTest::ParamType>& info) {
                           return absl::StrCat(DTypeName(std::get<0>(info.param)), "_",
                                               testing::LayoutName(std::get<1>(info.param)));
                         });

TEST(CrossEntropyTest, InPlaceOverLargeVocabularyMatchesSoftmaxMinusOneHot) {
  // dlogits overwrites logits (one [n, v] buffer, as llm.c does); v of a real vocabulary.
  Generator gen(702);
  const int64_t n = 5, v = 32000;
  Tensor logits = Randn({n, v}, DType::kF32, gen, 4.0);
  const auto vl = Values(logits);
  const std::vector<int64_t> tv = {17, ops::kIgnoreIndex, 0, v - 1, 12345};
  const Tensor targets = ValueOrDie(Tensor::FromVector(tv, {n}));
  Outputs o;
  ASSERT_TRUE(ops::CrossEntropyForward(o.loss_sum, o.num_valid, nullptr, logits, targets).ok());
  std::vector<double> rows;
  int64_t count;
  const double total = ReferenceLoss(vl, tv, v, &rows, &count);
  ExpectClose(Values(o.loss_sum), {total}, {1e-4}, 1e-6, "loss_sum");
  ASSERT_TRUE(ops::CrossEntropyBackward(logits, logits, targets, 0.5f).ok());
  std::vector<double> want(n * v, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    if (tv[i] == ops::kIgnoreIndex) continue;
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < v; ++j) mx = std::max(mx, vl[i * v + j]);
    for (int64_t j = 0; j < v; ++j) sum += std::exp(vl[i * v + j] - mx);
    for (int64_t j = 0; j < v; ++j) {
      want[i * v + j] = 0.5 * (std::exp(vl[i * v + j] - mx) / sum - (j == tv[i] ? 1.0 : 0.0));
    }
  }
  ExpectClose(Values(logits), want, {1e-8}, 1e-5, "in-place dlogits");
}

TEST(CrossEntropyTest, AllRowsIgnored) {
  Generator gen(703);
  const Tensor logits = Randn({3, 4}, DType::kF32, gen);
  const Tensor targets = ValueOrDie(Tensor::FromVector(std::vector<int64_t>(3, -100), {3}));
  Outputs o;
  ASSERT_TRUE(ops::CrossEntropyForward(o.loss_sum, o.num_valid, nullptr, logits, targets).ok());
  EXPECT_EQ(Values(o.loss_sum)[0], 0.0);
  EXPECT_EQ(ValueOrDie(o.num_valid.ToInt64Vector())[0], 0);
  Tensor dlogits = Randn({3, 4}, DType::kF32, gen);
  ASSERT_TRUE(ops::CrossEntropyBackward(dlogits, logits, targets, 1.0f).ok());
  EXPECT_EQ(Values(dlogits), std::vector<double>(12, 0.0));
}

TEST(CrossEntropyTest, CustomIgnoreIndexAndI32Targets) {
  Generator gen(704);
  const Tensor logits = Randn({3, 4}, DType::kF32, gen);
  const Tensor targets = ValueOrDie(Tensor::FromVector(std::vector<int32_t>{2, 3, 1}, {3}));
  Outputs o;
  Tensor rows = ValueOrDie(Tensor::Empty({3}, DType::kF32));
  ASSERT_TRUE(ops::CrossEntropyForward(o.loss_sum, o.num_valid, &rows, logits, targets,
                                       /*ignore_index=*/3)
                  .ok());
  EXPECT_EQ(ValueOrDie(o.num_valid.ToInt64Vector())[0], 2);
  EXPECT_EQ(Values(rows)[1], 0.0);
  EXPECT_GT(Values(rows)[0], 0.0);
}

TEST(CrossEntropyTest, RejectsBadArguments) {
  Generator gen(705);
  const Tensor logits = Randn({2, 4}, DType::kF32, gen);
  Outputs o;
  const Tensor bad = ValueOrDie(Tensor::FromVector(std::vector<int64_t>{1, 4}, {2}));
  absl::Status st = ops::CrossEntropyForward(o.loss_sum, o.num_valid, nullptr, logits, bad);
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange) << st;
  EXPECT_NE(st.message().find("CrossEntropyForward: target 4 of row 1 is outside [0, 4) and is "
                              "not ignore_index (-100)"),
            std::string::npos)
      << st;
  Tensor dlogits = Randn({2, 4}, DType::kF32, gen);
  const auto before = Values(dlogits);
  st = ops::CrossEntropyBackward(dlogits, logits, bad, 1.f);
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange) << st;
  EXPECT_EQ(Values(dlogits), before) << "nothing may be written on error";
  const Tensor short_targets = ValueOrDie(Tensor::FromVector(std::vector<int64_t>{1}, {1}));
  st = ops::CrossEntropyForward(o.loss_sum, o.num_valid, nullptr, logits, short_targets);
  EXPECT_NE(st.message().find("targets has shape [1]; expected [2]"), std::string::npos) << st;
  Tensor loss_1d = ValueOrDie(Tensor::Empty({1}, DType::kF32));
  const Tensor targets = ValueOrDie(Tensor::FromVector(std::vector<int64_t>{1, 2}, {2}));
  st = ops::CrossEntropyForward(loss_1d, o.num_valid, nullptr, logits, targets);
  EXPECT_NE(st.message().find("loss_sum has shape [1]; expected []"), std::string::npos) << st;
  Tensor dlogits_bad = Randn({2, 5}, DType::kF32, gen);
  st = ops::CrossEntropyBackward(dlogits_bad, logits, targets, 1.f);
  EXPECT_NE(st.message().find("CrossEntropyBackward: dlogits has shape [2, 5]; expected [2, 4]"),
            std::string::npos)
      << st;
}

}  // namespace
}  // namespace cctune
