// The training ops of kernels/ops.h other than attention (cross-entropy and the backward ops)
// on CUDA tensors against the CPU backend (the reference, itself tested against fp64
// implementations and finite differences) on the same random inputs: f32 and 16-bit saved
// inputs, strided views, gradients that accumulate into nonzero values, null optional
// outputs, ignored rows, repeated embedding ids and broadcast shapes. Reductions must also be
// bit-reproducible run to run. Skips without a CUDA device.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/random.h"
#include "core/tensor.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_test_util.h"
#include "kernels/ops.h"

namespace cctune {
namespace {

using ::cctune::testing::AllClose;
using ::cctune::testing::AllEqual;
using ::cctune::testing::OutputPair;
using ::cctune::testing::Pair;
using ::cctune::testing::PairFrom;
using ::cctune::testing::RandomIntPair;
using ::cctune::testing::RandomPair;
using ::cctune::testing::Ulp;
using ::cctune::testing::ViewPair;

constexpr DType kFloats[] = {DType::kF32, DType::kBF16, DType::kF16};

class CudaBackwardOpsTest : public ::testing::Test {
 protected:
  void SetUp() override { CCTUNE_SKIP_WITHOUT_CUDA(); }
};

Shape Append(Shape s, int64_t last) {
  s.push_back(last);
  return s;
}

auto Narrow(int dim, int64_t start, int64_t len) {
  return [=](const Tensor& t) { return t.Narrow(dim, start, len); };
}

auto Transpose(int d0, int d1) {
  return [=](const Tensor& t) { return t.Transpose(d0, d1); };
}

// A random f32 gradient of `shape`, optionally a view of columns [2, 2 + last) of a wider one.
Pair Grad(const Shape& shape, Generator& gen, bool strided) {
  if (!strided || shape.empty()) return RandomPair(shape, DType::kF32, gen);
  Shape wide = shape;
  wide.back() += 3;
  return ViewPair(RandomPair(wide, DType::kF32, gen), Narrow(-1, 2, shape.back()));
}

// A random input of `shape` in `dtype`, optionally a strided view as Grad makes.
Pair Input(const Shape& shape, DType dtype, Generator& gen, bool strided, double scale = 1.0) {
  if (!strided || shape.empty()) return RandomPair(shape, dtype, gen, scale);
  Shape wide = shape;
  wide.back() += 3;
  return ViewPair(RandomPair(wide, dtype, gen, scale), Narrow(-1, 1, shape.back()));
}

// Targets in [0, v) with every `ignore_every`-th row (0: none) set to ignore_index.
Pair Targets(int64_t n, int64_t v, DType dtype, int ignore_every, Generator& gen) {
  Pair t = RandomIntPair({n}, DType::kI64, 0, v, gen);
  std::vector<int64_t> vals = ValueOrDie(t.cpu.ToInt64Vector());
  for (int64_t i = 0; ignore_every > 0 && i < n; i += ignore_every) vals[i] = ops::kIgnoreIndex;
  Tensor c = ValueOrDie(Tensor::FromVector(vals, {n}));
  return PairFrom(ValueOrDie(c.To(dtype)));
}

float Scalar(const Tensor& t) { return ValueOrDie(t.ToFloatVector())[0]; }
int64_t ScalarI(const Tensor& t) { return ValueOrDie(t.ToInt64Vector())[0]; }

// ---- Cross-entropy ----

TEST_F(CudaBackwardOpsTest, CrossEntropyForwardMatchesCpu) {
  Generator gen(1);
  const int64_t vocab[] = {5, 300, 5000};
  for (int64_t v : vocab) {
    for (DType dt : kFloats) {
      for (int variant = 0; variant < 4; ++variant) {
        const bool strided = variant & 1, with_rows = variant & 2;
        const int64_t n = 9;
        const Pair logits = Input({n, v}, dt, gen, strided, 2.0);
        const Pair targets =
            Targets(n, v, variant == 1 ? DType::kI32 : DType::kI64, with_rows ? 4 : 0, gen);
        Pair loss = OutputPair({}, DType::kF32);
        Pair count = OutputPair({}, DType::kI64);
        Pair rows = OutputPair({n}, DType::kF32);
        CCTUNE_ASSERT_OK(ops::CrossEntropyForward(
            loss.cpu, count.cpu, with_rows ? &rows.cpu : nullptr, logits.cpu, targets.cpu));
        CCTUNE_ASSERT_OK(ops::CrossEntropyForward(
            loss.gpu, count.gpu, with_rows ? &rows.gpu : nullptr, logits.gpu, targets.gpu));
        const std::string ctx = absl::StrCat(DTypeName(dt), " v ", v, " variant ", variant);
        EXPECT_NEAR(Scalar(loss.gpu), Scalar(loss.cpu), 1e-5 * n * std::log(v) + 1e-5) << ctx;
        EXPECT_EQ(ScalarI(count.gpu), ScalarI(count.cpu)) << ctx;
        EXPECT_EQ(ScalarI(count.gpu), with_rows ? n - 3 : n) << ctx;
        if (with_rows) {
          EXPECT_TRUE(AllClose(rows.gpu, rows.cpu, 2e-5, 1e-5)) << ctx;
        }
      }
    }
  }
}

TEST_F(CudaBackwardOpsTest, CrossEntropyAllIgnoredAndDeterministic) {
  Generator gen(2);
  const Pair logits = RandomPair({4, 50}, DType::kF32, gen);
  const Pair none = Targets(4, 50, DType::kI64, 1, gen);  // every row ignored
  Pair loss = OutputPair({}, DType::kF32), count = OutputPair({}, DType::kI64);
  CCTUNE_ASSERT_OK(ops::CrossEntropyForward(loss.gpu, count.gpu, nullptr, logits.gpu, none.gpu));
  EXPECT_EQ(Scalar(loss.gpu), 0.f);
  EXPECT_EQ(ScalarI(count.gpu), 0);

  // The same inputs give the same bits (fixed-order reductions), with or without row_loss.
  const Pair big = RandomPair({300, 700}, DType::kF32, gen, 3.0);
  const Pair t = Targets(300, 700, DType::kI64, 7, gen);
  Pair l1 = OutputPair({}, DType::kF32), l2 = OutputPair({}, DType::kF32);
  Pair rows = OutputPair({300}, DType::kF32);
  CCTUNE_ASSERT_OK(ops::CrossEntropyForward(l1.gpu, count.gpu, nullptr, big.gpu, t.gpu));
  CCTUNE_ASSERT_OK(ops::CrossEntropyForward(l2.gpu, count.gpu, &rows.gpu, big.gpu, t.gpu));
  EXPECT_TRUE(AllEqual(l1.gpu, ValueOrDie(l2.gpu.To(Device::Cpu()))));
  CCTUNE_ASSERT_OK(ops::CrossEntropyForward(l1.cpu, count.cpu, nullptr, big.cpu, t.cpu));
  EXPECT_NEAR(Scalar(l1.gpu), Scalar(l1.cpu), 1e-5 * std::fabs(Scalar(l1.cpu)));
}

TEST_F(CudaBackwardOpsTest, CrossEntropyRejectsBadTargets) {
  Generator gen(3);
  const Pair logits = RandomPair({3, 10}, DType::kF32, gen);
  for (int64_t bad : {-1, 10, 1000}) {
    const Pair targets =
        PairFrom(ValueOrDie(Tensor::FromVector(std::vector<int64_t>{1, bad, 2}, {3})));
    Pair loss = OutputPair({}, DType::kF32), count = OutputPair({}, DType::kI64);
    const absl::Status cpu =
        ops::CrossEntropyForward(loss.cpu, count.cpu, nullptr, logits.cpu, targets.cpu);
    const absl::Status gpu =
        ops::CrossEntropyForward(loss.gpu, count.gpu, nullptr, logits.gpu, targets.gpu);
    EXPECT_EQ(gpu.code(), absl::StatusCode::kOutOfRange) << gpu;
    EXPECT_EQ(gpu.message(), cpu.message());
    Pair d = OutputPair({3, 10}, DType::kF32);
    const absl::Status gb = ops::CrossEntropyBackward(d.gpu, logits.gpu, targets.gpu, 1.f);
    EXPECT_EQ(gb.code(), absl::StatusCode::kOutOfRange) << gb;
    EXPECT_NE(gb.message().find("target " + std::to_string(bad)), std::string::npos) << gb;
  }
}

TEST_F(CudaBackwardOpsTest, CrossEntropyBackwardMatchesCpu) {
  Generator gen(4);
  const int64_t vocab[] = {7, 1100};
  for (int64_t v : vocab) {
    for (DType dt : kFloats) {
      for (int variant = 0; variant < 3; ++variant) {
        const int64_t n = 6;
        const Pair targets = Targets(n, v, DType::kI64, 3, gen);
        const float scale = 0.37f;
        const std::string ctx = absl::StrCat(DTypeName(dt), " v ", v, " variant ", variant);
        if (variant == 2) {
          if (dt != DType::kF32) continue;
          // In place: dlogits is logits itself.
          Pair logits = RandomPair({n, v}, DType::kF32, gen, 2.0);
          CCTUNE_ASSERT_OK(ops::CrossEntropyBackward(logits.cpu, logits.cpu, targets.cpu, scale));
          CCTUNE_ASSERT_OK(ops::CrossEntropyBackward(logits.gpu, logits.gpu, targets.gpu, scale));
          EXPECT_TRUE(AllClose(logits.gpu, logits.cpu, 1e-6, 1e-5)) << ctx;
          continue;
        }
        const bool strided = variant == 1;
        const Pair logits = Input({n, v}, dt, gen, strided, 2.0);
        Pair d = OutputPair({n, v + (strided ? 4 : 0)}, DType::kF32);
        if (strided) d = ViewPair(d, Narrow(1, 3, v));
        CCTUNE_ASSERT_OK(ops::CrossEntropyBackward(d.cpu, logits.cpu, targets.cpu, scale));
        CCTUNE_ASSERT_OK(ops::CrossEntropyBackward(d.gpu, logits.gpu, targets.gpu, scale));
        EXPECT_TRUE(AllClose(d.gpu, d.cpu, 1e-6, 1e-5)) << ctx;
      }
    }
  }
}

// ---- Linear ----

struct LinearCase {
  Shape lead;
  int64_t k, n;
};

TEST_F(CudaBackwardOpsTest, LinearBackwardMatchesCpu) {
  Generator gen(5);
  const LinearCase cases[] = {{{2, 3}, 33, 17}, {{5}, 64, 40}, {{1}, 1, 3}, {{37}, 20, 9}};
  const DType dts[] = {DType::kF32, DType::kBF16, DType::kF16};
  for (const LinearCase& c : cases) {
    for (DType dt : dts) {
      for (int variant = 0; variant < 6; ++variant) {
        // 0: all outputs; 1: strided x, transposed w, strided gradients; 2: dx only;
        // 3: dw only; 4: dbias only; 5: dx a permuted view (column-major [m, k] for one
        // leading dim; no [m, k] view at all for two).
        const bool strided = variant == 1;
        const Pair x = Input(Append(c.lead, c.k), dt, gen, strided);
        const double ws = 1.0 / std::sqrt(static_cast<double>(c.k));
        const Pair w = strided ? ViewPair(RandomPair({c.k, c.n}, dt, gen, ws), Transpose(0, 1))
                               : RandomPair({c.n, c.k}, dt, gen, ws);
        const Pair dy = Grad(Append(c.lead, c.n), gen, strided);
        Pair dx = Grad(Append(c.lead, c.k), gen, strided);
        if (variant == 5 && c.lead.size() == 1) {
          dx = ViewPair(RandomPair({c.k, c.lead[0]}, DType::kF32, gen), Transpose(0, 1));
        } else if (variant == 5) {
          dx = ViewPair(RandomPair({c.lead[1], c.lead[0], c.k}, DType::kF32, gen), Transpose(0, 1));
        }
        Pair dw = Grad({c.n, c.k}, gen, strided);
        Pair db = Grad({c.n}, gen, false);
        const bool want_dx = variant != 3 && variant != 4;
        const bool want_dw = variant < 2 || variant == 3;
        const bool want_db = variant < 2 || variant == 4;
        CCTUNE_ASSERT_OK(ops::LinearBackward(want_dx ? &dx.cpu : nullptr,
                                             want_dw ? &dw.cpu : nullptr,
                                             want_db ? &db.cpu : nullptr, dy.cpu, x.cpu, w.cpu));
        CCTUNE_ASSERT_OK(ops::LinearBackward(want_dx ? &dx.gpu : nullptr,
                                             want_dw ? &dw.gpu : nullptr,
                                             want_db ? &db.gpu : nullptr, dy.gpu, x.gpu, w.gpu));
        const std::string ctx = absl::StrCat(DTypeName(dt), " x ", ShapeToString(x.cpu.shape()),
                                             " n ", c.n, " variant ", variant);
        // f32 GEMMs in a different blocking: a few f32 ulps of the sums' magnitude.
        EXPECT_TRUE(AllClose(dx.gpu, dx.cpu, 2e-5, 2e-5)) << ctx;
        EXPECT_TRUE(AllClose(dw.gpu, dw.cpu, 1e-4, 2e-5)) << ctx;
        EXPECT_TRUE(AllClose(db.gpu, db.cpu, 2e-5, 2e-5)) << ctx;
      }
    }
  }
}

// ---- Embedding ----

TEST_F(CudaBackwardOpsTest, EmbeddingBackwardMatchesCpuBitForBit) {
  Generator gen(6);
  for (DType it : {DType::kI32, DType::kI64}) {
    for (int variant = 0; variant < 3; ++variant) {
      const bool strided = variant == 1;
      const int64_t v = 50, d = variant == 2 ? 300 : 37;
      // Ids from a small range, so most of them repeat.
      const Pair ids = RandomIntPair({3, 20}, it, 0, 10, gen);
      const Pair dy = Grad({3, 20, d}, gen, strided);
      Pair table = Grad({v, d}, gen, strided);
      CCTUNE_ASSERT_OK(ops::EmbeddingBackward(table.cpu, dy.cpu, ids.cpu));
      CCTUNE_ASSERT_OK(ops::EmbeddingBackward(table.gpu, dy.gpu, ids.gpu));
      // The same sums in the same (index) order: the same bits.
      EXPECT_TRUE(AllEqual(table.gpu, table.cpu)) << DTypeName(it) << " variant " << variant;
    }
  }
  // A 0-d id and a transposed ids view.
  const Pair one = PairFrom(ValueOrDie(Tensor::FromVector(std::vector<int64_t>{4}, {})));
  const Pair dy1 = RandomPair({8}, DType::kF32, gen);
  Pair t1 = RandomPair({6, 8}, DType::kF32, gen);
  CCTUNE_ASSERT_OK(ops::EmbeddingBackward(t1.cpu, dy1.cpu, one.cpu));
  CCTUNE_ASSERT_OK(ops::EmbeddingBackward(t1.gpu, dy1.gpu, one.gpu));
  EXPECT_TRUE(AllEqual(t1.gpu, t1.cpu));
  const Pair idt = ViewPair(RandomIntPair({5, 4}, DType::kI64, 0, 6, gen), Transpose(0, 1));
  const Pair dyt = RandomPair({4, 5, 8}, DType::kF32, gen);
  CCTUNE_ASSERT_OK(ops::EmbeddingBackward(t1.cpu, dyt.cpu, idt.cpu));
  CCTUNE_ASSERT_OK(ops::EmbeddingBackward(t1.gpu, dyt.gpu, idt.gpu));
  EXPECT_TRUE(AllEqual(t1.gpu, t1.cpu));
}

TEST_F(CudaBackwardOpsTest, EmbeddingBackwardRejectsBadIds) {
  Generator gen(7);
  const Pair ids = PairFrom(ValueOrDie(Tensor::FromVector(std::vector<int64_t>{0, 3, 9}, {3})));
  const Pair dy = RandomPair({3, 4}, DType::kF32, gen);
  Pair table = RandomPair({9, 4}, DType::kF32, gen);
  const Tensor before = ValueOrDie(table.gpu.To(Device::Cpu()));
  const absl::Status cpu = ops::EmbeddingBackward(table.cpu, dy.cpu, ids.cpu);
  const absl::Status gpu = ops::EmbeddingBackward(table.gpu, dy.gpu, ids.gpu);
  EXPECT_EQ(gpu.code(), absl::StatusCode::kOutOfRange) << gpu;
  EXPECT_EQ(gpu.message(), cpu.message());
  EXPECT_TRUE(AllEqual(table.gpu, before));  // nothing written
}

// ---- Row-wise ----

TEST_F(CudaBackwardOpsTest, RmsNormBackwardMatchesCpu) {
  Generator gen(8);
  const Shape shapes[] = {{3, 5, 64}, {1100, 24}, {40, 1030}, {1, 1}};
  for (const Shape& shape : shapes) {
    for (DType dt : kFloats) {
      for (int variant = 0; variant < 3; ++variant) {
        const bool strided = variant == 1, with_dw = variant != 2;
        const int64_t d = shape.back();
        const Pair x = Input(shape, dt, gen, strided);
        const Pair w = RandomPair({d}, variant == 1 ? DType::kF32 : dt, gen);
        const Pair dy = Grad(shape, gen, strided);
        Pair dx = Grad(shape, gen, strided);
        Pair dw = Grad({d}, gen, strided);
        CCTUNE_ASSERT_OK(
            ops::RmsNormBackward(dx.cpu, with_dw ? &dw.cpu : nullptr, dy.cpu, x.cpu, w.cpu, 1e-5f));
        CCTUNE_ASSERT_OK(
            ops::RmsNormBackward(dx.gpu, with_dw ? &dw.gpu : nullptr, dy.gpu, x.gpu, w.gpu, 1e-5f));
        const std::string ctx =
            absl::StrCat(DTypeName(dt), " ", ShapeToString(shape), " variant ", variant);
        EXPECT_TRUE(AllClose(dx.gpu, dx.cpu, 1e-5, 1e-5)) << ctx;
        // dweight sums up to 1100 rows of O(1) terms. With 16-bit x, x̂ is rounded to x's
        // dtype after the multiply by rstd, whose last bits differ with the summation order:
        // an element whose rounding flips moves its term by an ulp of x̂ (about 2^-7 for bf16).
        const double dw_tol = dt == DType::kF32 ? 2e-4 : 4 * Ulp(dt);
        EXPECT_TRUE(AllClose(dw.gpu, dw.cpu, dw_tol, 1e-5)) << ctx;
      }
    }
  }
}

TEST_F(CudaBackwardOpsTest, RmsNormBackwardIsDeterministic) {
  Generator gen(9);
  const Pair x = RandomPair({1100, 48}, DType::kBF16, gen);
  const Pair w = RandomPair({48}, DType::kBF16, gen);
  const Pair dy = RandomPair({1100, 48}, DType::kF32, gen);
  Pair dx1 = PairFrom(ValueOrDie(Tensor::Zeros({1100, 48}, DType::kF32)));
  Pair dx2 = PairFrom(ValueOrDie(Tensor::Zeros({1100, 48}, DType::kF32)));
  Pair dw1 = PairFrom(ValueOrDie(Tensor::Zeros({48}, DType::kF32)));
  Pair dw2 = PairFrom(ValueOrDie(Tensor::Zeros({48}, DType::kF32)));
  CCTUNE_ASSERT_OK(ops::RmsNormBackward(dx1.gpu, &dw1.gpu, dy.gpu, x.gpu, w.gpu, 1e-6f));
  CCTUNE_ASSERT_OK(ops::RmsNormBackward(dx2.gpu, &dw2.gpu, dy.gpu, x.gpu, w.gpu, 1e-6f));
  EXPECT_TRUE(AllEqual(dw1.gpu, ValueOrDie(dw2.gpu.To(Device::Cpu()))));
  EXPECT_TRUE(AllEqual(dx1.gpu, ValueOrDie(dx2.gpu.To(Device::Cpu()))));
}

TEST_F(CudaBackwardOpsTest, SoftmaxBackwardMatchesCpu) {
  Generator gen(10);
  const Shape shapes[] = {{5, 17}, {2, 3, 1100}, {4, 1}};
  for (const Shape& shape : shapes) {
    for (DType dt : kFloats) {
      for (int variant = 0; variant < 3; ++variant) {
        const bool strided = variant == 1, in_place = variant == 2;
        // y: a softmax output (rows sum to 1), stored in dt.
        const Pair logits = RandomPair(shape, DType::kF32, gen);
        Pair y = OutputPair(shape, dt);
        CCTUNE_ASSERT_OK(ops::Softmax(y.cpu, logits.cpu));
        y.gpu = ValueOrDie(y.cpu.To(y.gpu.device()));  // the same y on both sides
        Pair dy = Grad(shape, gen, strided);
        Pair dx = in_place ? dy : OutputPair(shape, DType::kF32);
        if (strided)
          dx = ViewPair(OutputPair(Append(Shape(shape.begin(), shape.end() - 1), shape.back() + 2),
                                   DType::kF32),
                        Narrow(-1, 1, shape.back()));
        CCTUNE_ASSERT_OK(ops::SoftmaxBackward(dx.cpu, dy.cpu, y.cpu));
        CCTUNE_ASSERT_OK(ops::SoftmaxBackward(dx.gpu, dy.gpu, y.gpu));
        EXPECT_TRUE(AllClose(dx.gpu, dx.cpu, 1e-6, 1e-5))
            << DTypeName(dt) << " " << ShapeToString(shape) << " variant " << variant;
      }
    }
  }
}

// ---- RoPE ----

TEST_F(CudaBackwardOpsTest, RopeBackwardMatchesCpu) {
  Generator gen(11);
  const int64_t b = 2, s = 5, n = 3, hd = 8, max_seq = 12;
  const Tensor inv = ValueOrDie(ops::RopeInvFrequencies(hd, 10000.0));
  Pair cos = OutputPair({max_seq, hd / 2}, DType::kF32),
       sin = OutputPair({max_seq, hd / 2}, DType::kF32);
  CCTUNE_ASSERT_OK(ops::RopeCache(cos.cpu, sin.cpu, inv));
  cos.gpu = ValueOrDie(cos.cpu.To(cos.gpu.device()));
  sin.gpu = ValueOrDie(sin.cpu.To(sin.gpu.device()));
  for (ops::RopePairing pairing : {ops::RopePairing::kInterleaved, ops::RopePairing::kHalfSplit}) {
    for (int variant = 0; variant < 3; ++variant) {
      // 0: contiguous, positions [b, s]; 1: dy a transposed view, positions [s] (i32);
      // 2: in place (dx is dy).
      const Pair pos = variant == 1 ? RandomIntPair({s}, DType::kI32, 0, max_seq, gen)
                                    : RandomIntPair({b, s}, DType::kI64, 0, max_seq, gen);
      Pair dy = variant == 1
                    ? ViewPair(RandomPair({b, n, s, hd}, DType::kF32, gen), Transpose(1, 2))
                    : RandomPair({b, s, n, hd}, DType::kF32, gen);
      Pair dx = variant == 2 ? dy : OutputPair({b, s, n, hd}, DType::kF32);
      CCTUNE_ASSERT_OK(ops::RopeBackward(dx.cpu, dy.cpu, cos.cpu, sin.cpu, pos.cpu, pairing));
      CCTUNE_ASSERT_OK(ops::RopeBackward(dx.gpu, dy.gpu, cos.gpu, sin.gpu, pos.gpu, pairing));
      EXPECT_TRUE(AllClose(dx.gpu, dx.cpu, 1e-6, 1e-6)) << "variant " << variant;
    }
  }
  const Pair bad =
      PairFrom(ValueOrDie(Tensor::FromVector(std::vector<int64_t>{0, 1, 2, 3, 12}, {s})));
  Pair dy = RandomPair({b, s, n, hd}, DType::kF32, gen);
  const absl::Status st =
      ops::RopeBackward(dy.gpu, dy.gpu, cos.gpu, sin.gpu, bad.gpu, ops::RopePairing::kHalfSplit);
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange) << st;
}

// ---- Elementwise ----

TEST_F(CudaBackwardOpsTest, SiluMulBackwardMatchesCpu) {
  Generator gen(12);
  for (DType dt : kFloats) {
    for (int variant = 0; variant < 3; ++variant) {
      // 0: contiguous; 1: strided inputs; 2: dgate and dup halves of one [..., 2f] buffer.
      const Shape shape = {4, 3, 33};
      const bool strided = variant == 1;
      const Pair gate = Input(shape, dt, gen, strided, 3.0);
      const Pair up = Input(shape, dt, gen, strided);
      const Pair dy = Grad(shape, gen, strided);
      Pair dgate, dup;
      if (variant == 2) {
        const Pair fused = RandomPair({4, 3, 66}, DType::kF32, gen);
        dgate = ViewPair(fused, Narrow(-1, 0, 33));
        dup = ViewPair(fused, Narrow(-1, 33, 33));
      } else {
        dgate = Grad(shape, gen, strided);
        dup = Grad(shape, gen, strided);
      }
      CCTUNE_ASSERT_OK(ops::SiluMulBackward(dgate.cpu, dup.cpu, dy.cpu, gate.cpu, up.cpu));
      CCTUNE_ASSERT_OK(ops::SiluMulBackward(dgate.gpu, dup.gpu, dy.gpu, gate.gpu, up.gpu));
      EXPECT_TRUE(AllClose(dgate.gpu, dgate.cpu, 1e-6, 1e-5)) << DTypeName(dt) << " " << variant;
      EXPECT_TRUE(AllClose(dup.gpu, dup.cpu, 1e-6, 1e-5)) << DTypeName(dt) << " " << variant;
    }
  }
}

struct BroadcastCase {
  Shape a, b;
};

const BroadcastCase kBroadcasts[] = {
    {{4, 6, 8}, {8}},
    {{4, 6, 8}, {6, 1}},
    {{4, 6, 8}, {4, 1, 1}},
    {{4, 6, 8}, {1}},
    {{4, 6, 8}, {4, 6, 8}},
    {{4, 6, 8}, {4, 1, 8}},
    {{3, 1100}, {1100}},
    {{2, 3, 700}, {3, 700}},
    {{3000}, {1}},
    // >= 1024 outputs (the column kernel) with more than 16 terms each, reduced over an outer
    // and over an inner dim.
    {{40, 1030}, {1030}},
    {{1030, 20}, {1030, 1}},
};

TEST_F(CudaBackwardOpsTest, AddBackwardMatchesCpu) {
  Generator gen(13);
  for (const BroadcastCase& c : kBroadcasts) {
    for (int variant = 0; variant < 4; ++variant) {
      // 0: both; 1: strided dy and da; 2: db only; 3: da only.
      const bool strided = variant == 1;
      const Pair dy = Grad(c.a, gen, strided);
      Pair da = Grad(c.a, gen, strided);
      Pair db = Grad(c.b, gen, false);
      Tensor* da_cpu = variant == 2 ? nullptr : &da.cpu;
      Tensor* da_gpu = variant == 2 ? nullptr : &da.gpu;
      Tensor* db_cpu = variant == 3 ? nullptr : &db.cpu;
      Tensor* db_gpu = variant == 3 ? nullptr : &db.gpu;
      CCTUNE_ASSERT_OK(ops::AddBackward(da_cpu, db_cpu, dy.cpu));
      CCTUNE_ASSERT_OK(ops::AddBackward(da_gpu, db_gpu, dy.gpu));
      const std::string ctx =
          absl::StrCat(ShapeToString(c.a), " <- ", ShapeToString(c.b), " variant ", variant);
      EXPECT_TRUE(AllEqual(da.gpu, da.cpu)) << ctx;  // one f32 add per element
      EXPECT_TRUE(AllClose(db.gpu, db.cpu, 1e-4, 1e-5)) << ctx;
    }
  }
}

TEST_F(CudaBackwardOpsTest, MulBackwardMatchesCpu) {
  Generator gen(14);
  for (const BroadcastCase& c : kBroadcasts) {
    for (DType dt : kFloats) {
      for (int variant = 0; variant < 4; ++variant) {
        const bool strided = variant == 1;
        const Pair a = Input(c.a, dt, gen, strided);
        const Pair b = Input(c.b, variant == 1 ? DType::kF32 : dt, gen, false);
        const Pair dy = Grad(c.a, gen, strided);
        Pair da = Grad(c.a, gen, strided);
        Pair db = Grad(c.b, gen, false);
        Tensor* da_cpu = variant == 2 ? nullptr : &da.cpu;
        Tensor* da_gpu = variant == 2 ? nullptr : &da.gpu;
        Tensor* db_cpu = variant == 3 ? nullptr : &db.cpu;
        Tensor* db_gpu = variant == 3 ? nullptr : &db.gpu;
        CCTUNE_ASSERT_OK(ops::MulBackward(da_cpu, db_cpu, dy.cpu, a.cpu, b.cpu));
        CCTUNE_ASSERT_OK(ops::MulBackward(da_gpu, db_gpu, dy.gpu, a.gpu, b.gpu));
        const std::string ctx = absl::StrCat(DTypeName(dt), " ", ShapeToString(c.a), " <- ",
                                             ShapeToString(c.b), " variant ", variant);
        EXPECT_TRUE(AllClose(da.gpu, da.cpu, 1e-6, 1e-6)) << ctx;
        EXPECT_TRUE(AllClose(db.gpu, db.cpu, 1e-4, 1e-5)) << ctx;
      }
    }
  }
}

TEST_F(CudaBackwardOpsTest, BroadcastReductionsAreDeterministic) {
  Generator gen(15);
  // Both reduction kernels: many kept outputs (columns) and few (one block per output).
  for (const Shape& bshape : {Shape{1500}, Shape{3, 1}}) {
    const Pair dy = RandomPair({3, 1500}, DType::kF32, gen);
    Pair db1 = PairFrom(ValueOrDie(Tensor::Zeros(bshape, DType::kF32)));
    Pair db2 = PairFrom(ValueOrDie(Tensor::Zeros(bshape, DType::kF32)));
    CCTUNE_ASSERT_OK(ops::AddBackward(nullptr, &db1.gpu, dy.gpu));
    CCTUNE_ASSERT_OK(ops::AddBackward(nullptr, &db2.gpu, dy.gpu));
    EXPECT_TRUE(AllEqual(db1.gpu, ValueOrDie(db2.gpu.To(Device::Cpu())))) << ShapeToString(bshape);
  }
}

}  // namespace
}  // namespace cctune
