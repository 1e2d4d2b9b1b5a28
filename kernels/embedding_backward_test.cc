// EmbeddingBackward against fp64 finite differences of an fp64 lookup: repeated ids, i32 and
// i64 ids, strided dy and dtable, accumulation into existing values, results independent of
// the thread count, and out-of-range ids (nothing written).
#include <omp.h>

#include <vector>

#include "core/random.h"
#include "gtest/gtest.h"
#include "kernels/cpu/op_test_util.h"
#include "kernels/ops.h"

namespace cctune {
namespace {

using testing::ExpectGradClose;
using testing::Layout;
using testing::Minus;
using testing::NumericGradient;
using testing::Randn;
using testing::Values;
using testing::WithLayout;

Tensor RandomIds(const Shape& shape, int64_t v, DType dtype, Generator& gen) {
  std::vector<int64_t> ids(NumElements(shape));
  for (int64_t& id : ids) id = static_cast<int64_t>(gen.UniformInt(v));
  Tensor t = ValueOrDie(Tensor::FromVector(ids, shape));
  return ValueOrDie(t.To(dtype));
}

// fp64 loss: sum_i dy[i, :] · table[ids[i], :].
double LookupLoss(const std::vector<double>& table, const std::vector<int64_t>& ids,
                  const std::vector<double>& dy, int64_t d) {
  double loss = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    for (int64_t j = 0; j < d; ++j) loss += dy[i * d + j] * table[ids[i] * d + j];
  }
  return loss;
}

class EmbeddingBackwardTest : public ::testing::TestWithParam<Layout> {};

TEST_P(EmbeddingBackwardTest, MatchesFiniteDifferences) {
  const Layout layout = GetParam();
  Generator gen(201);
  struct Case {
    Shape ids;
    int64_t v, d;
  };
  for (const Case& c :
       {Case{{5}, 3, 4}, Case{{2, 7}, 5, 9}, Case{{1}, 1, 1}, Case{{3, 4}, 20, 33}}) {
    for (DType idt : {DType::kI64, DType::kI32}) {
      const Tensor ids = RandomIds(c.ids, c.v, idt, gen);
      Shape ys = c.ids;
      ys.push_back(c.d);
      const Tensor dy = WithLayout(Randn(ys, DType::kF32, gen), layout);
      Tensor dtable = WithLayout(Randn({c.v, c.d}, DType::kF32, gen), layout);
      const auto before = Values(dtable);
      ASSERT_TRUE(ops::EmbeddingBackward(dtable, dy, ids).ok());
      const auto vid = ValueOrDie(ids.ToInt64Vector());
      const auto vdy = Values(dy);
      const auto want = NumericGradient(
          [&](const std::vector<double>& t) { return LookupLoss(t, vid, vdy, c.d); },
          Values(Randn({c.v, c.d}, DType::kF32, gen)));
      ExpectGradClose(Minus(Values(dtable), before), want, 1e-5,
                      absl::StrCat("dtable ids ", ShapeToString(c.ids), " ", DTypeName(idt), " v ",
                                   c.v, " d ", c.d));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, EmbeddingBackwardTest, ::testing::ValuesIn(testing::kAllLayouts),
                         [](const ::testing::TestParamInfo<Layout>& info) {
                           return testing::LayoutName(info.param);
                         });

TEST(EmbeddingBackwardDeterminismTest, SameBitsForAnyThreadCount) {
  // Many repeats of few ids: each row's sum must not depend on how threads split the work.
  Generator gen(202);
  const Tensor ids = RandomIds({4000}, 37, DType::kI64, gen);
  const Tensor dy = Randn({4000, 96}, DType::kF32, gen);
  const int saved = omp_get_max_threads();
  std::vector<double> first;
  for (int threads : {1, 3, 8}) {
    omp_set_num_threads(threads);
    Tensor dtable = ValueOrDie(Tensor::Zeros({37, 96}, DType::kF32));
    ASSERT_TRUE(ops::EmbeddingBackward(dtable, dy, ids).ok());
    if (first.empty()) {
      first = Values(dtable);
    } else {
      EXPECT_EQ(Values(dtable), first) << threads << " threads";
    }
  }
  omp_set_num_threads(saved);
}

TEST(EmbeddingBackwardTest, RejectsOutOfRangeIdsAndBadShapes) {
  Generator gen(203);
  const Tensor ids = ValueOrDie(Tensor::FromVector(std::vector<int64_t>{0, 4, 2}, {3}));
  const Tensor dy = Randn({3, 2}, DType::kF32, gen);
  Tensor dtable = Randn({4, 2}, DType::kF32, gen);
  const auto before = Values(dtable);
  absl::Status st = ops::EmbeddingBackward(dtable, dy, ids);
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange) << st;
  EXPECT_NE(st.message().find("EmbeddingBackward: id 4 at index 1"), std::string::npos) << st;
  EXPECT_EQ(Values(dtable), before) << "nothing may be written on error";
  const Tensor dy_bad = Randn({3, 3}, DType::kF32, gen);
  st = ops::EmbeddingBackward(dtable, dy_bad, ids);
  EXPECT_NE(st.message().find("dy has shape [3, 3]; expected [3, 2]"), std::string::npos) << st;
  Tensor dtable_bf16 = Randn({4, 2}, DType::kBF16, gen);
  st = ops::EmbeddingBackward(dtable_bf16, dy, ids);
  EXPECT_NE(st.message().find("dtable has dtype bf16; expected f32"), std::string::npos) << st;
}

}  // namespace
}  // namespace cctune
