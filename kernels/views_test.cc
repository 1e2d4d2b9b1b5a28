// Broadcast (Expand, stride-0) inputs for every op family: each result must match the same op
// on a contiguous copy of the inputs (whose results the per-op tests check against f64
// references), and an f64 reference where one is short to write.
#include <cmath>
#include <vector>

#include "core/random.h"
#include "gtest/gtest.h"
#include "kernels/cpu/op_test_util.h"
#include "kernels/ops.h"

namespace cctune {
namespace {

using testing::ExpectClose;
using testing::Randn;
using testing::Values;

Tensor Copy(const Tensor& t) { return ValueOrDie(t.Clone()); }
Tensor Empty(const Shape& s, DType dt = DType::kF32) { return ValueOrDie(Tensor::Empty(s, dt)); }

TEST(ExpandedInputsTest, LinearWithBroadcastActivations) {
  Generator gen(81);
  for (DType dt : testing::kFloatTypes) {
    const Tensor row = Randn({1, 1, 19}, dt, gen);
    const Tensor x = ValueOrDie(row.Expand({2, 3, 19}));
    const Tensor w = Randn({5, 19}, DType::kBF16, gen);
    Tensor out = Empty({2, 3, 5}), want = Empty({2, 3, 5});
    ASSERT_TRUE(ops::Linear(out, x, w).ok());
    ASSERT_TRUE(ops::Linear(want, Copy(x), w).ok());
    ExpectClose(Values(out), Values(want), {1e-6}, 1e-6, "Linear expanded x");
  }
}

TEST(ExpandedInputsTest, AttentionWithKvSharedAcrossBatch) {
  // One K/V (a shared prompt) broadcast over a batch of queries, and a mask broadcast over
  // query positions.
  Generator gen(82);
  const Tensor q = Randn({3, 4, 5, 16}, DType::kF32, gen);
  const Tensor k1 = Randn({1, 2, 9, 16}, DType::kBF16, gen);
  const Tensor v1 = Randn({1, 2, 9, 16}, DType::kBF16, gen);
  const Tensor k = ValueOrDie(k1.Expand({3, 2, 9, 16}));
  const Tensor v = ValueOrDie(v1.Expand({3, 2, 9, 16}));
  std::vector<float> mrow(9);
  for (float& m : mrow) m = gen.Uniform() < 0.7f ? 1.f : 0.f;
  mrow[0] = 1.f;
  const Tensor mask1 = ValueOrDie(Tensor::FromVector(mrow, {1, 1, 9}, DType::kBool));
  const Tensor mask = ValueOrDie(mask1.Expand({3, 5, 9}));
  const Tensor mask_copy = Copy(mask);
  for (bool causal : {false, true}) {
    ops::AttentionOptions opt, opt_copy;
    opt.causal = opt_copy.causal = causal;
    opt.mask = &mask;
    opt_copy.mask = &mask_copy;
    Tensor out = Empty(q.shape()), want = Empty(q.shape());
    ASSERT_TRUE(ops::Attention(out, q, k, v, opt).ok());
    ASSERT_TRUE(ops::Attention(want, q, Copy(k), Copy(v), opt_copy).ok());
    ExpectClose(Values(out), Values(want), {1e-6}, 1e-6, "Attention expanded k/v/mask");
  }
}

TEST(ExpandedInputsTest, RowOpsOnBroadcastRows) {
  Generator gen(83);
  const Tensor row = Randn({1, 33}, DType::kBF16, gen);
  const Tensor x = ValueOrDie(row.Expand({4, 33}));
  const Tensor w = Randn({33}, DType::kF32, gen);
  Tensor out = Empty({4, 33}), want = Empty({4, 33});
  ASSERT_TRUE(ops::RmsNorm(out, x, w, 1e-5f).ok());
  ASSERT_TRUE(ops::RmsNorm(want, Copy(x), w, 1e-5f).ok());
  EXPECT_EQ(Values(out), Values(want)) << "RmsNorm";
  ASSERT_TRUE(ops::Softmax(out, x).ok());
  ASSERT_TRUE(ops::Softmax(want, Copy(x)).ok());
  EXPECT_EQ(Values(out), Values(want)) << "Softmax";
  // A weight broadcast from a scalar.
  const Tensor w1 =
      ValueOrDie(ValueOrDie(Tensor::FromVector(std::vector<float>{2.f}, {1})).Expand({33}));
  ASSERT_TRUE(ops::RmsNorm(out, x, w1, 1e-5f).ok());
  ASSERT_TRUE(ops::RmsNorm(want, Copy(x), Copy(w1), 1e-5f).ok());
  EXPECT_EQ(Values(out), Values(want)) << "RmsNorm broadcast weight";
  Tensor idx = Empty({4}, DType::kI64);
  ASSERT_TRUE(ops::Argmax(idx, x).ok());
  const auto vr = Values(row);
  const int64_t best = std::max_element(vr.begin(), vr.end()) - vr.begin();
  for (int64_t i : ValueOrDie(idx.ToInt64Vector())) EXPECT_EQ(i, best);
}

TEST(ExpandedInputsTest, ElementwiseWithBothInputsBroadcast) {
  Generator gen(84);
  const Tensor a = ValueOrDie(Randn({3, 1, 7}, DType::kF16, gen).Expand({3, 4, 7}));
  const Tensor b = ValueOrDie(Randn({4, 1}, DType::kF32, gen).Expand({4, 7}));
  Tensor out = Empty({3, 4, 7});
  ASSERT_TRUE(ops::Mul(out, a, b).ok());
  const auto va = Values(a), vb = Values(ValueOrDie(b.Expand({3, 4, 7})));
  std::vector<double> want(va.size());
  for (size_t i = 0; i < va.size(); ++i) want[i] = va[i] * vb[i];
  ExpectClose(Values(out), want, {0.0}, 1e-7, "Mul expanded a and b");
  Tensor g = Empty({3, 4, 7});
  ASSERT_TRUE(ops::SiluMul(g, a, ValueOrDie(b.Expand({3, 4, 7}))).ok());
  for (size_t i = 0; i < va.size(); ++i) want[i] = va[i] / (1 + std::exp(-va[i])) * vb[i];
  ExpectClose(Values(g), want, {1e-7}, 1e-6, "SiluMul expanded");
}

TEST(ExpandedInputsTest, EmbeddingAndRopeWithBroadcastIndices) {
  Generator gen(85);
  const Tensor table = Randn({11, 6}, DType::kF32, gen);
  const Tensor ids1 = ValueOrDie(Tensor::FromVector(std::vector<int64_t>{3, 10, 0}, {1, 3}));
  const Tensor ids = ValueOrDie(ids1.Expand({2, 3}));
  Tensor out = Empty({2, 3, 6}), want = Empty({2, 3, 6});
  ASSERT_TRUE(ops::Embedding(out, table, ids).ok());
  ASSERT_TRUE(ops::Embedding(want, table, Copy(ids)).ok());
  EXPECT_EQ(Values(out), Values(want));
  // Rope: positions [b, s] broadcast from [1, s], x broadcast over heads.
  const Tensor inv = ValueOrDie(ops::RopeInvFrequencies(8, 10000.0));
  Tensor cos = Empty({16, 4}), sin = Empty({16, 4});
  ASSERT_TRUE(ops::RopeCache(cos, sin, inv).ok());
  const Tensor pos1 = ValueOrDie(Tensor::FromVector(std::vector<int32_t>{5, 6, 7}, {1, 3}));
  const Tensor pos = ValueOrDie(pos1.Expand({2, 3}));
  const Tensor x = ValueOrDie(Randn({2, 3, 1, 8}, DType::kF32, gen).Expand({2, 3, 4, 8}));
  Tensor r = Empty({2, 3, 4, 8}), rw = Empty({2, 3, 4, 8});
  ASSERT_TRUE(ops::Rope(r, x, cos, sin, pos, ops::RopePairing::kHalfSplit).ok());
  ASSERT_TRUE(ops::Rope(rw, Copy(x), cos, sin, Copy(pos), ops::RopePairing::kHalfSplit).ok());
  EXPECT_EQ(Values(r), Values(rw));
}

}  // namespace
}  // namespace cctune
