// SiluMulBackward, AddBackward and MulBackward against fp64 central finite differences of fp64
// forwards: f32/bf16 saved inputs, strided views, gate/up gradients as halves of one buffer,
// broadcasts along leading, inner and several dims, accumulation, and argument errors.
#include <cmath>
#include <tuple>
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

double SiluMulLoss(const std::vector<double>& gate, const std::vector<double>& up,
                   const std::vector<double>& dy) {
  double loss = 0;
  for (size_t i = 0; i < gate.size(); ++i) {
    loss += dy[i] * gate[i] / (1 + std::exp(-gate[i])) * up[i];
  }
  return loss;
}

class SiluMulBackwardTest : public ::testing::TestWithParam<std::tuple<DType, Layout>> {};

TEST_P(SiluMulBackwardTest, MatchesFiniteDifferences) {
  const auto [dt, layout] = GetParam();
  Generator gen(501);
  for (const Shape& shape : {Shape{1}, Shape{3, 7}, Shape{2, 3, 33}}) {
    const Tensor gate = WithLayout(Randn(shape, dt, gen, 3.0), layout);  // both tails of σ
    const Tensor up = WithLayout(Randn(shape, dt, gen), layout);
    const Tensor dy = WithLayout(Randn(shape, DType::kF32, gen), layout);
    Tensor dgate = WithLayout(Randn(shape, DType::kF32, gen), layout);
    Tensor dup = WithLayout(Randn(shape, DType::kF32, gen), layout);
    const auto dg0 = Values(dgate), du0 = Values(dup);
    ASSERT_TRUE(ops::SiluMulBackward(dgate, dup, dy, gate, up).ok());
    const auto vg = Values(gate), vu = Values(up), vdy = Values(dy);
    const auto gg =
        NumericGradient([&](const std::vector<double>& p) { return SiluMulLoss(p, vu, vdy); }, vg);
    const auto gu =
        NumericGradient([&](const std::vector<double>& p) { return SiluMulLoss(vg, p, vdy); }, vu);
    const std::string what = absl::StrCat(ShapeToString(shape), " ", DTypeName(dt));
    ExpectGradClose(Minus(Values(dgate), dg0), gg, 1e-5, "dgate " + what);
    ExpectGradClose(Minus(Values(dup), du0), gu, 1e-5, "dup " + what);
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, SiluMulBackwardTest,
                         ::testing::Combine(::testing::Values(DType::kF32, DType::kBF16),
                                            ::testing::ValuesIn(testing::kAllLayouts)),
                         [](const ::testing::TestParamInfo<SiluMulBackwardTest::ParamType>& info) {
                           return absl::StrCat(DTypeName(std::get<0>(info.param)), "_",
                                               testing::LayoutName(std::get<1>(info.param)));
                         });

TEST(SiluMulBackwardTest, FusedGateUpGradientBuffer) {
  // A fused gate/up projection: gate = h[..., :f], up = h[..., f:], and their gradients are the
  // two halves of one zeroed [..., 2f] buffer.
  Generator gen(502);
  const int64_t f = 9;
  const Tensor h = Randn({4, 2 * f}, DType::kF32, gen);
  const Tensor gate = ValueOrDie(h.Narrow(1, 0, f)), up = ValueOrDie(h.Narrow(1, f, f));
  const Tensor dy = Randn({4, f}, DType::kF32, gen);
  Tensor dh = ValueOrDie(Tensor::Zeros({4, 2 * f}, DType::kF32));
  Tensor dgate = ValueOrDie(dh.Narrow(1, 0, f)), dup = ValueOrDie(dh.Narrow(1, f, f));
  ASSERT_TRUE(ops::SiluMulBackward(dgate, dup, dy, gate, up).ok());
  const auto vdy = Values(dy);
  const auto want = NumericGradient(
      [&](const std::vector<double>& p) {
        std::vector<double> g, u;
        for (int64_t r = 0; r < 4; ++r) {
          g.insert(g.end(), p.begin() + r * 2 * f, p.begin() + r * 2 * f + f);
          u.insert(u.end(), p.begin() + r * 2 * f + f, p.begin() + (r + 1) * 2 * f);
        }
        return SiluMulLoss(g, u, vdy);
      },
      Values(h));
  ExpectGradClose(Values(dh), want, 1e-5, "fused dh");
}

// fp64 loss sum(dy · (a op broadcast(b))), b trailing-aligned to a's shape.
double BinaryLoss(const std::vector<double>& a, const std::vector<double>& b, const Shape& as,
                  const Shape& bs, const std::vector<double>& dy, bool mul) {
  const int nd = static_cast<int>(as.size());
  double loss = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    // Index of b for a's element i.
    int64_t rem = static_cast<int64_t>(i), bi = 0, bstride = 1;
    for (int d = nd - 1; d >= 0; --d) {
      const int64_t idx = rem % as[d];
      rem /= as[d];
      const int bd = d - (nd - static_cast<int>(bs.size()));
      if (bd >= 0) {
        if (bs[bd] != 1) bi += idx * bstride;
        bstride *= bs[bd];
      }
    }
    loss += dy[i] * (mul ? a[i] * b[bi] : a[i] + b[bi]);
  }
  return loss;
}

class BinaryBackwardTest : public ::testing::TestWithParam<Layout> {};

TEST_P(BinaryBackwardTest, MatchesFiniteDifferences) {
  const Layout layout = GetParam();
  Generator gen(503);
  struct Case {
    Shape a, b;
  };
  const std::vector<Case> cases = {
      {{3, 5}, {3, 5}},              // same shape
      {{4, 7}, {7}},                 // a bias: leading broadcast
      {{2, 3, 5}, {1, 5}},           // leading broadcast with an explicit 1
      {{2, 3, 5}, {3, 1}},           // inner broadcast: the general reduction
      {{2, 3, 5}, {2, 1, 5}},        // middle broadcast
      {{2, 3, 4, 5}, {1, 3, 1, 1}},  // several dims
      {{6}, {1}},                    // scalar
  };
  for (const Case& c : cases) {
    for (bool mul : {false, true}) {
      const std::string what =
          absl::StrCat(mul ? "Mul" : "Add", " a ", ShapeToString(c.a), " b ", ShapeToString(c.b));
      const Tensor a = WithLayout(Randn(c.a, DType::kF32, gen), layout);
      const Tensor b = WithLayout(Randn(c.b, DType::kBF16, gen), layout);
      const Tensor dy = WithLayout(Randn(c.a, DType::kF32, gen), layout);
      Tensor da = WithLayout(Randn(c.a, DType::kF32, gen), layout);
      Tensor db = WithLayout(Randn(c.b, DType::kF32, gen), layout);
      const auto da0 = Values(da), db0 = Values(db);
      if (mul) {
        ASSERT_TRUE(ops::MulBackward(&da, &db, dy, a, b).ok()) << what;
      } else {
        ASSERT_TRUE(ops::AddBackward(&da, &db, dy).ok()) << what;
      }
      const auto va = Values(a), vb = Values(b), vdy = Values(dy);
      const auto ga = NumericGradient(
          [&](const std::vector<double>& p) { return BinaryLoss(p, vb, c.a, c.b, vdy, mul); }, va);
      const auto gb = NumericGradient(
          [&](const std::vector<double>& p) { return BinaryLoss(va, p, c.a, c.b, vdy, mul); }, vb);
      ExpectGradClose(Minus(Values(da), da0), ga, 1e-5, "da " + what);
      ExpectGradClose(Minus(Values(db), db0), gb, 1e-5, "db " + what);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, BinaryBackwardTest, ::testing::ValuesIn(testing::kAllLayouts),
                         [](const ::testing::TestParamInfo<Layout>& info) {
                           return testing::LayoutName(info.param);
                         });

TEST(BinaryBackwardTest, LargeBiasReductionMatchesReference) {
  // Enough rows for the blocked parallel reduction.
  Generator gen(504);
  const Tensor dy = Randn({3000, 40}, DType::kF32, gen);
  Tensor db = ValueOrDie(Tensor::Zeros({40}, DType::kF32));
  ASSERT_TRUE(ops::AddBackward(nullptr, &db, dy).ok());
  const auto v = Values(dy);
  std::vector<double> want(40, 0.0);
  for (int64_t r = 0; r < 3000; ++r) {
    for (int64_t j = 0; j < 40; ++j) want[j] += v[r * 40 + j];
  }
  ExpectGradClose(Values(db), want, 1e-5, "db [40] over 3000 rows");
}

TEST(BinaryBackwardTest, RejectsBadArguments) {
  Generator gen(505);
  const Tensor dy = Randn({2, 3}, DType::kF32, gen);
  Tensor db_bad = Randn({2}, DType::kF32, gen);
  absl::Status st = ops::AddBackward(nullptr, &db_bad, dy);
  EXPECT_NE(st.message().find("AddBackward: db [2] does not broadcast to dy [2, 3]"),
            std::string::npos)
      << st;
  const Tensor a = Randn({2, 3}, DType::kF32, gen), b = Randn({3}, DType::kF32, gen);
  Tensor da_bad = Randn({3, 2}, DType::kF32, gen);
  st = ops::MulBackward(&da_bad, nullptr, dy, a, b);
  EXPECT_NE(st.message().find("MulBackward: da has shape [3, 2]; expected [2, 3]"),
            std::string::npos)
      << st;
  Tensor dg = Randn({2, 3}, DType::kF32, gen), du = Randn({2, 3}, DType::kF32, gen);
  const Tensor up_bad = Randn({2, 4}, DType::kF32, gen);
  st = ops::SiluMulBackward(dg, du, dy, a, up_bad);
  EXPECT_NE(st.message().find("SiluMulBackward: up has shape [2, 4]; expected [2, 3]"),
            std::string::npos)
      << st;
}

}  // namespace
}  // namespace cctune
