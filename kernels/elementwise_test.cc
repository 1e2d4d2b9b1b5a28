// Add, Mul, Scale, SiluMul and Cast against fp64 references, over dtypes, layouts,
// broadcasting and aliasing; plus their argument checks.
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
using testing::Layout;
using testing::Randn;
using testing::Roundoff;
using testing::Values;
using testing::WithLayout;

class ElementwiseTest : public ::testing::TestWithParam<std::tuple<DType, Layout>> {
 protected:
  DType dtype() const { return std::get<0>(GetParam()); }
  Layout layout() const { return std::get<1>(GetParam()); }
  double rtol() const { return 2 * Roundoff(dtype()) + 1e-6; }
};

const std::vector<Shape>& Shapes() {
  static const std::vector<Shape> shapes = {{1}, {3}, {17}, {2, 129}, {3, 5, 7}, {2, 3, 4, 33}};
  return shapes;
}

// The shapes b may take for a of shape s: equal, trailing dims, and size-1 broadcasts.
std::vector<Shape> BroadcastShapes(const Shape& s) {
  std::vector<Shape> out = {s, {s.back()}, {1}};
  if (s.size() >= 2) {
    Shape mid = s;
    mid[s.size() - 1] = 1;  // broadcast along the last dim
    out.push_back(mid);
    out.push_back(Shape(s.begin() + 1, s.end()));
  }
  return out;
}

template <typename Fn>
void CheckBinary(const char* name, DType dt, Layout layout, double rtol, Fn op, bool mul) {
  Generator gen(11);
  for (const Shape& s : Shapes()) {
    for (const Shape& bs : BroadcastShapes(s)) {
      const Tensor a = WithLayout(Randn(s, dt, gen), layout);
      const Tensor b = WithLayout(Randn(bs, dt, gen), layout);
      Tensor out = EmptyLike(s, dt, layout);
      ASSERT_TRUE(op(out, a, b).ok()) << name;
      const auto va = Values(a), vb = Values(b);
      const Tensor bx = ValueOrDie(b.Expand(s));
      const auto vbx = Values(bx);
      std::vector<double> want(va.size());
      for (size_t i = 0; i < va.size(); ++i) want[i] = mul ? va[i] * vbx[i] : va[i] + vbx[i];
      ExpectClose(Values(out), want, {testing::SubnormalStep(dt)}, rtol,
                  absl::StrCat(name, " ", ShapeToString(s), " + ", ShapeToString(bs)));
    }
  }
}

TEST_P(ElementwiseTest, AddMatchesReference) {
  CheckBinary(
      "Add", dtype(), layout(), rtol(),
      [](Tensor& o, const Tensor& a, const Tensor& b) { return ops::Add(o, a, b); }, false);
}

TEST_P(ElementwiseTest, MulMatchesReference) {
  CheckBinary(
      "Mul", dtype(), layout(), rtol(),
      [](Tensor& o, const Tensor& a, const Tensor& b) { return ops::Mul(o, a, b); }, true);
}

TEST_P(ElementwiseTest, ScaleMatchesReference) {
  Generator gen(12);
  for (const Shape& s : Shapes()) {
    const Tensor x = WithLayout(Randn(s, dtype(), gen), layout());
    Tensor out = EmptyLike(s, dtype(), layout());
    ASSERT_TRUE(ops::Scale(out, x, -1.75f).ok());
    std::vector<double> want = Values(x);
    for (double& v : want) v *= -1.75;
    ExpectClose(Values(out), want, {testing::SubnormalStep(dtype())}, rtol(),
                "Scale " + ShapeToString(s));
  }
}

TEST_P(ElementwiseTest, SiluMulMatchesReference) {
  Generator gen(13);
  for (const Shape& s : Shapes()) {
    const Tensor g = WithLayout(Randn(s, dtype(), gen, 4.0), layout());
    const Tensor u = WithLayout(Randn(s, dtype(), gen), layout());
    Tensor out = EmptyLike(s, dtype(), layout());
    ASSERT_TRUE(ops::SiluMul(out, g, u).ok());
    const auto vg = Values(g), vu = Values(u);
    std::vector<double> want(vg.size());
    for (size_t i = 0; i < vg.size(); ++i) want[i] = vg[i] / (1 + std::exp(-vg[i])) * vu[i];
    ExpectClose(Values(out), want, {1e-7 + testing::SubnormalStep(dtype())}, rtol() + 1e-6,
                "SiluMul " + ShapeToString(s));
  }
}

TEST_P(ElementwiseTest, InPlaceOutputIsAnInput) {
  Generator gen(14);
  const Shape s = {3, 5, 37};
  Tensor a = WithLayout(Randn(s, dtype(), gen), layout());
  const Tensor b = Randn({37}, dtype(), gen);
  const auto va = Values(a), vb = Values(b);
  ASSERT_TRUE(ops::Add(a, a, b).ok());
  std::vector<double> want(va.size());
  for (size_t i = 0; i < va.size(); ++i) want[i] = va[i] + vb[i % 37];
  ExpectClose(Values(a), want, {testing::SubnormalStep(dtype())}, rtol(), "Add in place");
  const auto before = Values(a);
  ASSERT_TRUE(ops::Scale(a, a, 0.5f).ok());
  for (size_t i = 0; i < va.size(); ++i) want[i] = before[i] * 0.5;
  ExpectClose(Values(a), want, {testing::SubnormalStep(dtype())}, rtol(), "Scale in place");
  Tensor g = WithLayout(Randn(s, dtype(), gen), layout());
  const Tensor u = Randn(s, dtype(), gen);
  const auto vg = Values(g), vu = Values(u);
  ASSERT_TRUE(ops::SiluMul(g, g, u).ok());
  for (size_t i = 0; i < va.size(); ++i) want[i] = vg[i] / (1 + std::exp(-vg[i])) * vu[i];
  ExpectClose(Values(g), want, {1e-7 + testing::SubnormalStep(dtype())}, rtol() + 1e-6,
              "SiluMul in place");
}

INSTANTIATE_TEST_SUITE_P(DTypesAndLayouts, ElementwiseTest,
                         ::testing::Combine(::testing::ValuesIn(testing::kFloatTypes),
                                            ::testing::ValuesIn(testing::kAllLayouts)),
                         [](const ::testing::TestParamInfo<ElementwiseTest::ParamType>& info) {
                           return absl::StrCat(DTypeName(std::get<0>(info.param)), "_",
                                               testing::LayoutName(std::get<1>(info.param)));
                         });

TEST(ElementwiseMixedTest, MixedDTypesRoundOnceIntoOut) {
  Generator gen(15);
  const Tensor a = Randn({4, 65}, DType::kBF16, gen);
  const Tensor b = Randn({65}, DType::kF32, gen);
  Tensor out = ValueOrDie(Tensor::Empty({4, 65}, DType::kF16));
  ASSERT_TRUE(ops::Mul(out, a, b).ok());
  const auto va = Values(a), vb = Values(b), vo = Values(out);
  for (size_t i = 0; i < va.size(); ++i) {
    const float prod = static_cast<float>(va[i]) * static_cast<float>(vb[i % 65]);
    EXPECT_EQ(vo[i], F16ToFloat(FloatToF16(prod))) << i;
  }
}

TEST(CastTest, ConvertsBetweenAllDTypes) {
  Generator gen(16);
  const Tensor x = Randn({3, 41}, DType::kF32, gen, 50.0);
  const auto vx = Values(x);
  for (DType to : {DType::kBF16, DType::kF16, DType::kF32, DType::kI32, DType::kI64}) {
    Tensor out = WithLayout(x, Layout::kTransposed, to);  // strided destination
    ASSERT_TRUE(ops::Cast(out, WithLayout(x, Layout::kPadded)).ok());
    const auto vo = Values(out);
    for (size_t i = 0; i < vx.size(); ++i) {
      const float f = static_cast<float>(vx[i]);
      double want = f;
      if (to == DType::kBF16) want = Bf16ToFloat(FloatToBf16(f));
      if (to == DType::kF16) want = F16ToFloat(FloatToF16(f));
      if (to == DType::kI32 || to == DType::kI64) want = std::trunc(f);
      ASSERT_EQ(vo[i], want) << DTypeName(to) << " element " << i;
    }
  }
}

TEST(ElementwiseErrorsTest, MessagesNameTheOffendingValues) {
  Generator gen(17);
  const Tensor a = Randn({2, 3}, DType::kF32, gen);
  const Tensor b = Randn({4}, DType::kF32, gen);
  Tensor out = ValueOrDie(Tensor::Empty({2, 3}, DType::kF32));
  absl::Status st = ops::Add(out, a, b);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("Add: b [4] does not broadcast to a [2, 3]"), std::string::npos)
      << st;
  Tensor wrong = ValueOrDie(Tensor::Empty({3, 2}, DType::kF32));
  st = ops::Mul(wrong, a, a);
  EXPECT_NE(st.message().find("Mul: out has shape [3, 2]; expected [2, 3]"), std::string::npos)
      << st;
  Tensor ints = ValueOrDie(Tensor::Empty({2, 3}, DType::kI64));
  st = ops::Scale(out, ints, 2.f);
  EXPECT_NE(st.message().find("Scale: x has dtype i64"), std::string::npos) << st;
  Tensor undefined;
  st = ops::SiluMul(out, a, undefined);
  EXPECT_NE(st.message().find("SiluMul: up is an undefined tensor"), std::string::npos) << st;
  Tensor meta = ValueOrDie(Tensor::Empty({2, 3}, DType::kF32, Device::Meta()));
  st = ops::Add(out, a, meta);
  EXPECT_NE(st.message().find("Add: b is on meta but out is on cpu"), std::string::npos) << st;
  Tensor row = ValueOrDie(Tensor::Empty({1, 3}, DType::kF32));
  Tensor broadcast_out = ValueOrDie(row.Expand({2, 3}));
  st = ops::Add(broadcast_out, a, a);
  EXPECT_NE(st.message().find("stride 0 in dim 0"), std::string::npos) << st;
  st = ops::Cast(wrong, a);
  EXPECT_NE(st.message().find("Cast: out has shape [3, 2]; expected [2, 3]"), std::string::npos)
      << st;
  // On the meta device an op only validates.
  Tensor meta_out = ValueOrDie(Tensor::Empty({2, 3}, DType::kF32, Device::Meta()));
  EXPECT_TRUE(ops::Add(meta_out, meta, meta).ok());
}

}  // namespace
}  // namespace cctune
