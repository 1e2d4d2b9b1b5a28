// Embedding against a direct gather: table dtypes, out dtypes, id dtypes, strided tables and
// ids; out-of-range ids come back as OutOfRange naming the id.
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

double RoundTo(DType t, double v) {
  const float f = static_cast<float>(v);
  if (t == DType::kBF16) return Bf16ToFloat(FloatToBf16(f));
  if (t == DType::kF16) return F16ToFloat(FloatToF16(f));
  return f;
}

// (table dtype, out dtype, layout of table, ids and out)
class EmbeddingTest : public ::testing::TestWithParam<std::tuple<DType, DType, Layout>> {};

TEST_P(EmbeddingTest, GathersRows) {
  const auto [tt, ot, layout] = GetParam();
  Generator gen(41);
  for (DType id_type : {DType::kI32, DType::kI64}) {
    for (const Shape& ids_shape : std::vector<Shape>{{1}, {7}, {2, 5}, {}}) {
      for (int64_t d : {1, 3, 129}) {
        const int64_t v = 37;
        const Tensor table = WithLayout(Randn({v, d}, tt, gen), layout);
        std::vector<int64_t> id_values(NumElements(ids_shape));
        for (int64_t& id : id_values) id = static_cast<int64_t>(gen.UniformInt(v));
        if (!id_values.empty()) id_values[0] = v - 1;
        const Tensor ids =
            WithLayout(ValueOrDie(Tensor::FromVector(absl::Span<const int64_t>(id_values),
                                                     ids_shape, id_type)),
                       layout);
        Shape out_shape = ids_shape;
        out_shape.push_back(d);
        Tensor out = EmptyLike(out_shape, ot, layout);
        ASSERT_TRUE(ops::Embedding(out, table, ids).ok());
        const auto vt = Values(table), vo = Values(out);
        for (size_t i = 0; i < id_values.size(); ++i) {
          for (int64_t j = 0; j < d; ++j) {
            ASSERT_EQ(vo[i * d + j], RoundTo(ot, vt[id_values[i] * d + j]))
                << "id " << i << " col " << j << " d=" << d;
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, EmbeddingTest,
                         ::testing::Combine(::testing::ValuesIn(testing::kFloatTypes),
                                            ::testing::ValuesIn(testing::kFloatTypes),
                                            ::testing::ValuesIn(testing::kAllLayouts)),
                         [](const ::testing::TestParamInfo<EmbeddingTest::ParamType>& info) {
                           return absl::StrCat("table_", DTypeName(std::get<0>(info.param)),
                                               "_out_", DTypeName(std::get<1>(info.param)), "_",
                                               testing::LayoutName(std::get<2>(info.param)));
                         });

TEST(EmbeddingErrorsTest, OutOfRangeIdsAreNamed) {
  Generator gen(42);
  const Tensor table = Randn({10, 4}, DType::kF32, gen);
  Tensor out = ValueOrDie(Tensor::Full({2, 2, 4}, 5.0, DType::kF32));
  const Tensor ids = ValueOrDie(Tensor::FromVector(std::vector<int64_t>{1, 2, 10, 3}, {2, 2}));
  absl::Status st = ops::Embedding(out, table, ids);
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange) << st;
  EXPECT_NE(st.message().find("Embedding: id 10 at index 2"), std::string::npos) << st;
  EXPECT_NE(st.message().find("[0, 10)"), std::string::npos) << st;
  for (double v : Values(out)) EXPECT_EQ(v, 5.0);  // nothing written
  const Tensor neg = ValueOrDie(Tensor::FromVector(std::vector<int32_t>{-1, 0, 0, 0}, {2, 2}));
  st = ops::Embedding(out, table, neg);
  EXPECT_NE(st.message().find("Embedding: id -1 at index 0"), std::string::npos) << st;

  const Tensor fids = Randn({2, 2}, DType::kF32, gen);
  st = ops::Embedding(out, table, fids);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("Embedding: ids has dtype f32; expected i32 or i64"),
            std::string::npos)
      << st;
  Tensor wrong = ValueOrDie(Tensor::Empty({2, 2, 5}, DType::kF32));
  st = ops::Embedding(wrong, table, ids);
  EXPECT_NE(st.message().find("Embedding: out has shape [2, 2, 5]; expected [2, 2, 4]"),
            std::string::npos)
      << st;
}

}  // namespace
}  // namespace cctune
