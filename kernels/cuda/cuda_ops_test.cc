// Every op of kernels/ops.h on CUDA tensors against the CPU backend (the reference, itself
// tested against fp64 implementations) on the same random inputs: several shapes including
// odd sizes, non-contiguous views, every float dtype and mixed dtypes. Tolerances are a few
// units in the last place of the lowest-precision dtype involved; selection ops (Argmax,
// TopK, Sample) and gathers must match exactly. Skips without a CUDA device.
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

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

class CudaOpsTest : public ::testing::Test {
 protected:
  void SetUp() override { CCTUNE_SKIP_WITHOUT_CUDA(); }
};

// The coarsest of the given dtypes (f32 < f16 < bf16).
DType Coarsest(std::initializer_list<DType> types) {
  DType worst = DType::kF32;
  for (DType t : types) {
    if (Ulp(t) > Ulp(worst)) worst = t;
  }
  return worst;
}

// Tolerance (used as both atol and rtol on O(1) values) for results rounded into `dtype`
// after f32 math done in a different order: a few ulps, and f32 reassociation noise.
double Tol(DType dtype) { return dtype == DType::kF32 ? 1e-5 : 4 * Ulp(dtype); }

std::string Ctx(std::initializer_list<DType> types) {
  std::string s;
  for (DType t : types) absl::StrAppend(&s, s.empty() ? "" : "/", DTypeName(t));
  return s;
}

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

// A CPU f32 tensor of N(0, scale^2) draws rounded to multiples of 0.5, so rows have ties.
Tensor Quantized(const Shape& shape, Generator& gen, double scale) {
  std::vector<float> v(NumElements(shape));
  for (float& x : v) x = std::round(static_cast<float>(gen.Normal() * scale) * 2.f) / 2.f;
  return ValueOrDie(Tensor::FromVector(v, shape));
}

// ---- Linear algebra ----

struct LinearCase {
  Shape lead;
  int64_t k, n;
};

TEST_F(CudaOpsTest, LinearMatchesCpu) {
  Generator gen(10);
  const LinearCase cases[] = {{{1}, 64, 32}, {{2, 3}, 33, 17}, {{5}, 300, 129}, {{4}, 1, 7}};
  for (const LinearCase& c : cases) {
    for (DType dt : kFloats) {
      for (int variant = 0; variant < 4; ++variant) {
        const bool strided = variant & 1, with_bias = variant & 2;
        // x: contiguous, or columns [3, 3 + k) of a wider tensor.
        Pair x = RandomPair(Append(c.lead, c.k + (strided ? 5 : 0)), dt, gen);
        if (strided) x = ViewPair(x, Narrow(-1, 3, c.k));
        // w [n, k]: contiguous, or the transpose of a [k, n] tensor (column-major).
        const double ws = 1.0 / std::sqrt(static_cast<double>(c.k));
        const Pair w = strided ? ViewPair(RandomPair({c.k, c.n}, dt, gen, ws), Transpose(0, 1))
                               : RandomPair({c.n, c.k}, dt, gen, ws);
        const Pair bias = RandomPair({c.n}, dt, gen);
        Pair out = OutputPair(Append(c.lead, c.n + (strided ? 2 : 0)), dt);
        if (strided) out = ViewPair(out, Narrow(-1, 1, c.n));
        CCTUNE_ASSERT_OK(ops::Linear(out.cpu, x.cpu, w.cpu, with_bias ? &bias.cpu : nullptr));
        CCTUNE_ASSERT_OK(ops::Linear(out.gpu, x.gpu, w.gpu, with_bias ? &bias.gpu : nullptr));
        EXPECT_TRUE(AllClose(out.gpu, out.cpu, Tol(dt), Tol(dt)))
            << DTypeName(dt) << " x " << ShapeToString(x.cpu.shape()) << " n " << c.n << " strided "
            << strided << " bias " << with_bias;
      }
    }
  }
}

// Decode shapes (the GEMV kernel: m = 1, and f32 up to m = 6) and cuBLAS (m = 8, 9): 16-byte pieces with two in
// flight (k = 520), and rows padded to an aligned stride whose k leaves an element-wise tail
// (k = 102 of 104), against the CPU; bias on and off, out in the weight's dtype or f32.
TEST_F(CudaOpsTest, LinearDecodeShapesMatchCpu) {
  Generator gen(12);
  for (int64_t m : {1, 3, 6, 8, 9}) {
    for (const auto& [k, n, pad] : {std::tuple<int64_t, int64_t, int64_t>{520, 70, 0},
                                    std::tuple<int64_t, int64_t, int64_t>{102, 33, 2}}) {
      for (DType dt : kFloats) {
        for (int variant = 0; variant < 4; ++variant) {
          const bool with_bias = variant & 1;
          const DType out_dt = variant & 2 ? DType::kF32 : dt;
          Pair x = RandomPair({m, k + pad}, dt, gen);
          Pair w = RandomPair({n, k + pad}, dt, gen, 1.0 / std::sqrt(static_cast<double>(k)));
          if (pad > 0) {
            x = ViewPair(x, Narrow(1, 0, k));
            w = ViewPair(w, Narrow(1, 0, k));
          }
          const Pair bias = RandomPair({n}, DType::kF32, gen);
          Pair out = OutputPair({m, n}, out_dt);
          CCTUNE_ASSERT_OK(ops::Linear(out.cpu, x.cpu, w.cpu, with_bias ? &bias.cpu : nullptr));
          CCTUNE_ASSERT_OK(ops::Linear(out.gpu, x.gpu, w.gpu, with_bias ? &bias.gpu : nullptr));
          const double tol = Tol(Coarsest({dt, out_dt}));
          EXPECT_TRUE(AllClose(out.gpu, out.cpu, tol, tol))
              << DTypeName(dt) << " m " << m << " k " << k << " (row " << k + pad << ") n " << n
              << " out " << DTypeName(out_dt) << " bias " << with_bias;
        }
      }
    }
  }
}

TEST_F(CudaOpsTest, LinearMixedDtypesMatchCpu) {
  Generator gen(11);
  struct Mixed {
    DType x, w, out, bias;
  };
  const Mixed mixes[] = {{DType::kF32, DType::kBF16, DType::kF32, DType::kF32},
                         {DType::kBF16, DType::kBF16, DType::kF32, DType::kBF16},
                         {DType::kF32, DType::kF32, DType::kBF16, DType::kF16},
                         {DType::kF16, DType::kBF16, DType::kBF16, DType::kF32},
                         {DType::kBF16, DType::kF16, DType::kF16, DType::kBF16}};
  for (const Mixed& m : mixes) {
    for (const LinearCase& c : {LinearCase{{3}, 96, 40}, LinearCase{{2, 1}, 17, 9}}) {
      const Pair x = RandomPair(Append(c.lead, c.k), m.x, gen);
      const Pair w = RandomPair({c.n, c.k}, m.w, gen, 1.0 / std::sqrt(double(c.k)));
      const Pair bias = RandomPair({c.n}, m.bias, gen);
      Pair out = OutputPair(Append(c.lead, c.n), m.out);
      CCTUNE_ASSERT_OK(ops::Linear(out.cpu, x.cpu, w.cpu, &bias.cpu));
      CCTUNE_ASSERT_OK(ops::Linear(out.gpu, x.gpu, w.gpu, &bias.gpu));
      const double tol = Tol(Coarsest({m.x, m.w, m.out, m.bias}));
      EXPECT_TRUE(AllClose(out.gpu, out.cpu, tol, tol)) << Ctx({m.x, m.w, m.out, m.bias});
    }
  }
}

TEST_F(CudaOpsTest, LinearWithEmptyInputs) {
  Generator gen(12);
  // k == 0: the result is the bias alone.
  const Pair x = RandomPair({3, 0}, DType::kF32, gen);
  const Pair w = RandomPair({4, 0}, DType::kF32, gen);
  const Pair bias = RandomPair({4}, DType::kF32, gen);
  Pair out = OutputPair({3, 4}, DType::kF32);
  CCTUNE_ASSERT_OK(ops::Linear(out.cpu, x.cpu, w.cpu, &bias.cpu));
  CCTUNE_ASSERT_OK(ops::Linear(out.gpu, x.gpu, w.gpu, &bias.gpu));
  EXPECT_TRUE(AllClose(out.gpu, out.cpu, 0, 0));
  // m == 0: nothing to do.
  const Pair x0 = RandomPair({0, 5}, DType::kBF16, gen);
  const Pair w0 = RandomPair({4, 5}, DType::kBF16, gen);
  Pair out0 = OutputPair({0, 4}, DType::kBF16);
  CCTUNE_ASSERT_OK(ops::Linear(out0.gpu, x0.gpu, w0.gpu));
}

struct MatmulCase {
  Shape batch;
  int64_t m, k, n;
};

TEST_F(CudaOpsTest, MatmulMatchesCpu) {
  Generator gen(13);
  const MatmulCase cases[] = {
      {{2, 3}, 5, 7, 3}, {{1}, 1, 64, 65}, {{4}, 33, 17, 1}, {{}, 9, 31, 12}, {{2, 2}, 16, 8, 24}};
  for (const MatmulCase& c : cases) {
    const int nb = static_cast<int>(c.batch.size());
    for (DType dt : kFloats) {
      for (int variant = 0; variant < 5; ++variant) {
        if ((variant == 2 && nb == 0) || (variant == 4 && nb < 2)) continue;
        Shape a_shape = c.batch, b_shape = c.batch;
        const double bs = 1.0 / std::sqrt(static_cast<double>(c.k));
        Pair a, b;
        if (variant == 1) {  // both column-major (transposed views)
          a = ViewPair(RandomPair(Append(Append(a_shape, c.k), c.m), dt, gen), Transpose(-1, -2));
          b = ViewPair(RandomPair(Append(Append(b_shape, c.n), c.k), dt, gen, bs),
                       Transpose(-1, -2));
        } else {
          a = RandomPair(Append(Append(a_shape, c.m), c.k), dt, gen);
          Shape b_src = b_shape;
          // 2: b broadcast over every batch dim (stride 0 everywhere); 4: over the first only.
          if (variant == 2) b_src.assign(nb, 1);
          if (variant == 4) b_src[0] = 1;
          b = RandomPair(Append(Append(b_src, c.k), c.n), dt, gen, bs);
          if (variant == 2 || variant == 4) {
            const Shape full = Append(Append(b_shape, c.k), c.n);
            b = ViewPair(b, [full](const Tensor& t) { return t.Expand(full); });
          }
        }
        if (variant == 3) {  // every other row of a, and a strided out
          a = ViewPair(RandomPair(Append(Append(a_shape, 2 * c.m), c.k), dt, gen),
                       [](const Tensor& t) { return t.Slice(-2, 0, t.size(-2), 2); });
        }
        Pair out = OutputPair(Append(Append(c.batch, c.m), c.n + (variant == 3 ? 3 : 0)), dt);
        if (variant == 3) out = ViewPair(out, Narrow(-1, 2, c.n));
        CCTUNE_ASSERT_OK(ops::Matmul(out.cpu, a.cpu, b.cpu));
        CCTUNE_ASSERT_OK(ops::Matmul(out.gpu, a.gpu, b.gpu));
        EXPECT_TRUE(AllClose(out.gpu, out.cpu, Tol(dt), Tol(dt)))
            << DTypeName(dt) << " a " << ShapeToString(a.cpu.shape()) << " b "
            << ShapeToString(b.cpu.shape()) << " variant " << variant;
      }
    }
  }
}

TEST_F(CudaOpsTest, MatmulMixedDtypesMatchCpu) {
  Generator gen(14);
  struct Mixed {
    DType a, b, out;
  };
  for (const Mixed& m : {Mixed{DType::kBF16, DType::kBF16, DType::kF32},
                         Mixed{DType::kF32, DType::kBF16, DType::kF32},
                         Mixed{DType::kF16, DType::kF16, DType::kBF16},
                         Mixed{DType::kF32, DType::kF32, DType::kF16}}) {
    const Pair a = RandomPair({3, 7, 20}, m.a, gen);
    const Pair b = RandomPair({3, 20, 11}, m.b, gen, 0.25);
    Pair out = OutputPair({3, 7, 11}, m.out);
    CCTUNE_ASSERT_OK(ops::Matmul(out.cpu, a.cpu, b.cpu));
    CCTUNE_ASSERT_OK(ops::Matmul(out.gpu, a.gpu, b.gpu));
    const double tol = Tol(Coarsest({m.a, m.b, m.out}));
    EXPECT_TRUE(AllClose(out.gpu, out.cpu, tol, tol)) << Ctx({m.a, m.b, m.out});
  }
}

// ---- Layers ----

TEST_F(CudaOpsTest, EmbeddingMatchesCpuExactly) {
  Generator gen(20);
  for (DType dt : kFloats) {
    for (DType out_dt : {dt, DType::kF32}) {
      for (DType id_dt : {DType::kI32, DType::kI64}) {
        for (const Shape& ids_shape : {Shape{2, 5}, Shape{7}}) {
          for (bool strided : {false, true}) {
            Pair table = RandomPair({37, strided ? 25 : 19}, dt, gen);
            if (strided) table = ViewPair(table, Narrow(1, 3, 19));
            const Pair ids = RandomIntPair(ids_shape, id_dt, 0, 37, gen);
            Pair out = OutputPair(Append(ids_shape, 19), out_dt);
            CCTUNE_ASSERT_OK(ops::Embedding(out.cpu, table.cpu, ids.cpu));
            CCTUNE_ASSERT_OK(ops::Embedding(out.gpu, table.gpu, ids.gpu));
            EXPECT_TRUE(AllEqual(out.gpu, out.cpu))
                << Ctx({dt, out_dt, id_dt}) << " ids " << ShapeToString(ids_shape);
          }
        }
      }
    }
  }
}

TEST_F(CudaOpsTest, EmbeddingRejectsOutOfRangeIds) {
  Generator gen(21);
  const Pair table = RandomPair({10, 4}, DType::kF32, gen);
  for (int64_t bad : {int64_t{10}, int64_t{-1}}) {
    const Pair ids = PairFrom(ValueOrDie(Tensor::FromVector(std::vector<int64_t>{1, 2, bad}, {3})));
    Pair out = OutputPair({3, 4}, DType::kF32);
    const absl::Status cpu = ops::Embedding(out.cpu, table.cpu, ids.cpu);
    const absl::Status gpu = ops::Embedding(out.gpu, table.gpu, ids.gpu);
    EXPECT_EQ(cpu.code(), absl::StatusCode::kOutOfRange) << cpu;
    EXPECT_EQ(gpu.code(), absl::StatusCode::kOutOfRange) << gpu;
    EXPECT_NE(gpu.message().find(absl::StrCat("id ", bad)), absl::string_view::npos) << gpu;
  }
}

TEST_F(CudaOpsTest, RmsNormMatchesCpu) {
  Generator gen(22);
  struct Types {
    DType x, w, out;
  };
  std::vector<Types> types;
  for (DType dt : kFloats) types.push_back({dt, dt, dt});
  types.push_back({DType::kBF16, DType::kF32, DType::kBF16});
  types.push_back({DType::kF32, DType::kBF16, DType::kF32});
  types.push_back({DType::kF16, DType::kF16, DType::kF32});
  for (const Types& t : types) {
    for (const Shape& shape : {Shape{3, 5, 67}, Shape{2, 4096}, Shape{1, 1}, Shape{4, 1000}}) {
      for (bool strided : {false, true}) {
        const int64_t d = shape.back();
        Pair x = RandomPair(Append(Shape(shape.begin(), shape.end() - 1), d + (strided ? 3 : 0)),
                            t.x, gen, 2.0);
        if (strided) x = ViewPair(x, Narrow(-1, 2, d));
        const Pair w = RandomPair({d}, t.w, gen);
        // strided: out's last dim has stride 2 (odd elements of a [..., d, 2] buffer).
        Pair out = OutputPair(strided ? Append(shape, 2) : shape, t.out);
        if (strided) out = ViewPair(out, [](const Tensor& o) { return o.Select(-1, 1); });
        CCTUNE_ASSERT_OK(ops::RmsNorm(out.cpu, x.cpu, w.cpu, 1e-5f));
        CCTUNE_ASSERT_OK(ops::RmsNorm(out.gpu, x.gpu, w.gpu, 1e-5f));
        const double tol = Tol(Coarsest({t.x, t.w, t.out}));
        EXPECT_TRUE(AllClose(out.gpu, out.cpu, tol, tol))
            << Ctx({t.x, t.w, t.out}) << " " << ShapeToString(shape) << " strided " << strided;
      }
    }
  }
}

TEST_F(CudaOpsTest, RopeCacheMatchesCpu) {
  ops::RopeScaling scaling;
  struct Case {
    int64_t head_dim;
    double base;
    const ops::RopeScaling* scaling;
    int64_t max_seq;
  };
  for (const Case& c : {Case{64, 10000.0, nullptr, 97}, Case{128, 500000.0, &scaling, 4096},
                        Case{2, 10000.0, nullptr, 5}}) {
    CCTUNE_ASSERT_OK_AND_ASSIGN(Tensor inv, ops::RopeInvFrequencies(c.head_dim, c.base, c.scaling));
    const Pair inv_freq = PairFrom(inv);
    const int64_t half = c.head_dim / 2;
    Pair cos = OutputPair({c.max_seq, half}, DType::kF32);
    // sin: a transposed view, to cover strided outputs.
    Pair sin = ViewPair(OutputPair({half, c.max_seq}, DType::kF32), Transpose(0, 1));
    CCTUNE_ASSERT_OK(ops::RopeCache(cos.cpu, sin.cpu, inv_freq.cpu));
    CCTUNE_ASSERT_OK(ops::RopeCache(cos.gpu, sin.gpu, inv_freq.gpu));
    // Both take cos/sin of the same f32 angle in f64: at most a double-rounding ulp apart.
    EXPECT_TRUE(AllClose(cos.gpu, cos.cpu, 2e-7, 0)) << "head_dim " << c.head_dim;
    EXPECT_TRUE(AllClose(sin.gpu, sin.cpu, 2e-7, 0)) << "head_dim " << c.head_dim;
  }
}

TEST_F(CudaOpsTest, RopeMatchesCpu) {
  Generator gen(23);
  CCTUNE_ASSERT_OK_AND_ASSIGN(Tensor inv, ops::RopeInvFrequencies(16, 10000.0));
  Tensor cos_cpu = ValueOrDie(Tensor::Empty({97, 8}, DType::kF32));
  Tensor sin_cpu = ValueOrDie(Tensor::Empty({97, 8}, DType::kF32));
  CCTUNE_ASSERT_OK(ops::RopeCache(cos_cpu, sin_cpu, inv));
  const Pair cos = PairFrom(cos_cpu), sin = PairFrom(sin_cpu);
  for (DType dt : kFloats) {
    for (ops::RopePairing pairing :
         {ops::RopePairing::kInterleaved, ops::RopePairing::kHalfSplit}) {
      for (int variant = 0; variant < 4; ++variant) {
        const bool strided = variant & 1, per_batch = variant & 2;
        // x [b, s, n, h_d] = [2, 7, 3, 16]; strided: [b, n, s, h_d] transposed.
        const Pair x = strided ? ViewPair(RandomPair({2, 3, 7, 16}, dt, gen), Transpose(1, 2))
                               : RandomPair({2, 7, 3, 16}, dt, gen);
        const Pair pos = per_batch ? RandomIntPair({2, 7}, DType::kI64, 0, 97, gen)
                                   : RandomIntPair({7}, DType::kI32, 0, 97, gen);
        Pair out = OutputPair({2, 7, 3, 16}, dt);
        CCTUNE_ASSERT_OK(ops::Rope(out.cpu, x.cpu, cos.cpu, sin.cpu, pos.cpu, pairing));
        CCTUNE_ASSERT_OK(ops::Rope(out.gpu, x.gpu, cos.gpu, sin.gpu, pos.gpu, pairing));
        const std::string ctx = absl::StrCat(DTypeName(dt), " pairing ", static_cast<int>(pairing),
                                             " variant ", variant);
        EXPECT_TRUE(AllClose(out.gpu, out.cpu, Tol(dt), Tol(dt))) << ctx;
        // In place on the GPU gives the same result.
        CCTUNE_ASSERT_OK_AND_ASSIGN(Tensor inplace, x.gpu.Clone());
        CCTUNE_ASSERT_OK(ops::Rope(inplace, inplace, cos.gpu, sin.gpu, pos.gpu, pairing));
        EXPECT_TRUE(AllClose(inplace, out.cpu, Tol(dt), Tol(dt))) << ctx << " in place";
      }
    }
  }
}

TEST_F(CudaOpsTest, RopeRejectsOutOfRangePositions) {
  Generator gen(24);
  const Pair cos = RandomPair({8, 2}, DType::kF32, gen), sin = RandomPair({8, 2}, DType::kF32, gen);
  const Pair x = RandomPair({1, 3, 1, 4}, DType::kF32, gen);
  const Pair pos = PairFrom(ValueOrDie(Tensor::FromVector(std::vector<int64_t>{0, 8, 1}, {3})));
  Pair out = OutputPair({1, 3, 1, 4}, DType::kF32);
  const absl::Status gpu =
      ops::Rope(out.gpu, x.gpu, cos.gpu, sin.gpu, pos.gpu, ops::RopePairing::kHalfSplit);
  EXPECT_EQ(gpu.code(), absl::StatusCode::kOutOfRange) << gpu;
  EXPECT_NE(gpu.message().find("position 8"), absl::string_view::npos) << gpu;
}

TEST_F(CudaOpsTest, SiluMulMatchesCpu) {
  Generator gen(25);
  struct Types {
    DType gate, up, out;
  };
  std::vector<Types> types;
  for (DType dt : kFloats) types.push_back({dt, dt, dt});
  types.push_back({DType::kBF16, DType::kF32, DType::kF32});
  for (const Types& t : types) {
    for (const Shape& shape : {Shape{3, 257}, Shape{2, 3, 5}, Shape{1}}) {
      for (bool strided : {false, true}) {
        Pair gate = RandomPair(shape, t.gate, gen, 3.0);
        if (strided && shape.size() > 1) {
          Shape flipped(shape.rbegin(), shape.rend());
          gate = ViewPair(RandomPair(flipped, t.gate, gen, 3.0), [](const Tensor& g) {
            std::vector<int> dims;
            for (int d = g.dim() - 1; d >= 0; --d) dims.push_back(d);
            return g.Permute(dims);
          });
        }
        const Pair up = RandomPair(shape, t.up, gen);
        Pair out = OutputPair(shape, t.out);
        CCTUNE_ASSERT_OK(ops::SiluMul(out.cpu, gate.cpu, up.cpu));
        CCTUNE_ASSERT_OK(ops::SiluMul(out.gpu, gate.gpu, up.gpu));
        const double tol = Tol(Coarsest({t.gate, t.up, t.out}));
        EXPECT_TRUE(AllClose(out.gpu, out.cpu, tol, tol))
            << Ctx({t.gate, t.up, t.out}) << " " << ShapeToString(shape) << " " << strided;
      }
    }
  }
}

TEST_F(CudaOpsTest, SoftmaxMatchesCpu) {
  Generator gen(26);
  for (DType dt : kFloats) {
    for (const Shape& shape : {Shape{4, 1000}, Shape{3, 5, 17}, Shape{2, 1}, Shape{1, 5000}}) {
      for (int variant = 0; variant < 3; ++variant) {
        Pair x = RandomPair(shape, dt, gen, 5.0);
        if (variant == 1) {  // a transposed (non-contiguous) input
          Shape flipped = shape;
          std::swap(flipped.front(), flipped.back());
          x = ViewPair(RandomPair(flipped, dt, gen, 5.0), Transpose(0, -1));
        }
        Pair out = OutputPair(shape, dt);
        CCTUNE_ASSERT_OK(ops::Softmax(out.cpu, x.cpu));
        if (variant == 2) {  // in place on the GPU
          CCTUNE_ASSERT_OK_AND_ASSIGN(out.gpu, x.gpu.Clone());
          CCTUNE_ASSERT_OK(ops::Softmax(out.gpu, out.gpu));
        } else {
          CCTUNE_ASSERT_OK(ops::Softmax(out.gpu, x.gpu));
        }
        EXPECT_TRUE(AllClose(out.gpu, out.cpu, Tol(dt) / 10, Tol(dt)))
            << DTypeName(dt) << " " << ShapeToString(shape) << " variant " << variant;
      }
    }
  }
}

struct AttnCase {
  int64_t b, n_h, n_kv, s_q, s_kv, h_d;
  bool causal;
  bool use_mask;
  float scale;
  bool strided;  // q/k/v/out as [b, s, n, h_d] buffers viewed as [b, n, s, h_d]
};

TEST_F(CudaOpsTest, AttentionMatchesCpu) {
  Generator gen(27);
  const AttnCase cases[] = {
      {2, 4, 2, 9, 9, 16, true, false, 0.f, false},      // prefill, grouped heads
      {2, 4, 2, 9, 9, 16, true, false, 0.f, true},       // the same through strided views
      {2, 2, 1, 3, 10, 32, true, false, 0.3f, false},    // causal with a KV prefix, custom scale
      {2, 3, 3, 5, 37, 8, false, true, 0.f, true},       // bool mask (one row fully masked)
      {1, 8, 2, 1, 1500, 64, false, false, 0.f, false},  // decode: the split-KV path
      {2, 4, 4, 2, 700, 16, true, true, 0.f, true},      // split path with causal + mask
      {1, 2, 1, 1, 2048, 128, false, false, 0.f, false},
      {1, 1, 1, 4, 4, 1, true, false, 0.f, false},  // h_d = 1
  };
  for (const AttnCase& c : cases) {
    for (DType dt : kFloats) {
      auto make = [&](int64_t n, int64_t s) {
        return c.strided ? ViewPair(RandomPair({c.b, s, n, c.h_d}, dt, gen), Transpose(1, 2))
                         : RandomPair({c.b, n, s, c.h_d}, dt, gen);
      };
      const Pair q = make(c.n_h, c.s_q), k = make(c.n_kv, c.s_kv), v = make(c.n_kv, c.s_kv);
      Pair out = c.strided ? ViewPair(OutputPair({c.b, c.s_q, c.n_h, c.h_d}, dt), Transpose(1, 2))
                           : OutputPair({c.b, c.n_h, c.s_q, c.h_d}, dt);
      Pair mask;
      ops::AttentionOptions cpu_opt, gpu_opt;
      if (c.use_mask) {
        std::vector<int64_t> m(c.b * c.s_q * c.s_kv);
        for (int64_t& e : m) e = gen.Uniform() < 0.7f ? 1 : 0;
        for (int64_t j = 0; j < c.s_kv; ++j) m[1 * c.s_kv + j] = 0;  // batch 0, query 1: none
        mask = PairFrom(
            ValueOrDie(ValueOrDie(Tensor::FromVector(m, {c.b, c.s_q, c.s_kv})).To(DType::kBool)));
        cpu_opt.mask = &mask.cpu;
        gpu_opt.mask = &mask.gpu;
      }
      cpu_opt.causal = gpu_opt.causal = c.causal;
      cpu_opt.scale = gpu_opt.scale = c.scale;
      CCTUNE_ASSERT_OK(ops::Attention(out.cpu, q.cpu, k.cpu, v.cpu, cpu_opt));
      CCTUNE_ASSERT_OK(ops::Attention(out.gpu, q.gpu, k.gpu, v.gpu, gpu_opt));
      EXPECT_TRUE(AllClose(out.gpu, out.cpu, Tol(dt), Tol(dt)))
          << DTypeName(dt) << " b " << c.b << " n_h " << c.n_h << " n_kv " << c.n_kv << " s_q "
          << c.s_q << " s_kv " << c.s_kv << " h_d " << c.h_d << " causal " << c.causal << " mask "
          << c.use_mask << " strided " << c.strided;
    }
  }
}

// ---- Elementwise ----

TEST_F(CudaOpsTest, AddAndMulBroadcastLikeCpu) {
  Generator gen(30);
  struct Types {
    DType a, b, out;
  };
  std::vector<Types> types;
  for (DType dt : kFloats) types.push_back({dt, dt, dt});
  types.push_back({DType::kBF16, DType::kF32, DType::kBF16});
  types.push_back({DType::kF32, DType::kF16, DType::kF32});
  const Shape a_shape = {2, 3, 5};
  for (const Types& t : types) {
    for (int variant = 0; variant < 6; ++variant) {
      const Pair a = RandomPair(a_shape, t.a, gen);
      Pair b;
      switch (variant) {
        case 0:
          b = RandomPair({5}, t.b, gen);
          break;
        case 1:
          b = RandomPair({3, 1}, t.b, gen);
          break;
        case 2:
          b = RandomPair({1, 3, 5}, t.b, gen);
          break;
        case 3:
          b = RandomPair({2, 3, 5}, t.b, gen);
          break;
        case 4:  // a permuted (non-contiguous) b of a's shape
          b = ViewPair(RandomPair({5, 3, 2}, t.b, gen), [](const Tensor& x) {
            return x.Permute({2, 1, 0});
          });
          break;
        default:
          b = RandomPair({1}, t.b, gen);
          break;
      }
      const double tol = Ulp(Coarsest({t.a, t.b, t.out}));
      for (bool mul : {false, true}) {
        Pair out = OutputPair(a_shape, t.out);
        auto op = mul ? ops::Mul : ops::Add;
        CCTUNE_ASSERT_OK(op(out.cpu, a.cpu, b.cpu));
        CCTUNE_ASSERT_OK(op(out.gpu, a.gpu, b.gpu));
        EXPECT_TRUE(AllClose(out.gpu, out.cpu, tol, tol))
            << (mul ? "Mul " : "Add ") << Ctx({t.a, t.b, t.out}) << " b "
            << ShapeToString(b.cpu.shape()) << " variant " << variant;
      }
    }
  }
  // In place (out is a) on the GPU, as a residual add does.
  const Pair a = RandomPair({4, 33}, DType::kF32, gen), b = RandomPair({33}, DType::kF32, gen);
  Pair out = OutputPair({4, 33}, DType::kF32);
  CCTUNE_ASSERT_OK(ops::Add(out.cpu, a.cpu, b.cpu));
  CCTUNE_ASSERT_OK_AND_ASSIGN(Tensor h, a.gpu.Clone());
  CCTUNE_ASSERT_OK(ops::Add(h, h, b.gpu));
  EXPECT_TRUE(AllClose(h, out.cpu, 1e-7, 1e-7));
  // Empty tensors are fine.
  const Pair e = RandomPair({0, 5}, DType::kF32, gen);
  Pair eo = OutputPair({0, 5}, DType::kF32);
  CCTUNE_ASSERT_OK(ops::Add(eo.gpu, e.gpu, b.gpu.Narrow(0, 0, 5).value()));
}

TEST_F(CudaOpsTest, ScaleMatchesCpu) {
  Generator gen(31);
  for (DType dt : kFloats) {
    for (bool strided : {false, true}) {
      const Pair x = strided ? ViewPair(RandomPair({33, 4}, dt, gen), Transpose(0, 1))
                             : RandomPair({4, 33}, dt, gen);
      for (DType out_dt : {dt, DType::kF32}) {
        Pair out = OutputPair({4, 33}, out_dt);
        CCTUNE_ASSERT_OK(ops::Scale(out.cpu, x.cpu, -1.7f));
        CCTUNE_ASSERT_OK(ops::Scale(out.gpu, x.gpu, -1.7f));
        const double tol = Ulp(Coarsest({dt, out_dt}));
        EXPECT_TRUE(AllClose(out.gpu, out.cpu, tol, tol)) << Ctx({dt, out_dt}) << " " << strided;
      }
    }
  }
}

TEST_F(CudaOpsTest, CastMatchesCpuExactly) {
  Generator gen(32);
  const Pair x = ViewPair(RandomPair({6, 5}, DType::kF32, gen, 100.0), Transpose(0, 1));
  for (DType to : {DType::kF32, DType::kBF16, DType::kF16}) {
    Pair out = OutputPair({5, 6}, to);
    CCTUNE_ASSERT_OK(ops::Cast(out.cpu, x.cpu));
    CCTUNE_ASSERT_OK(ops::Cast(out.gpu, x.gpu));
    EXPECT_TRUE(AllEqual(out.gpu, out.cpu)) << DTypeName(to);
  }
}

// ---- Selection and sampling ----

TEST_F(CudaOpsTest, ArgmaxMatchesCpuIncludingTiesAndNaN) {
  Generator gen(40);
  for (DType dt : kFloats) {
    for (int variant = 0; variant < 4; ++variant) {
      Tensor x_host;
      if (variant == 1) {  // transposed view
        x_host = ValueOrDie(ValueOrDie(Quantized({1001, 3}, gen, 2.0).To(dt)).Transpose(0, 1));
      } else if (variant == 2) {  // 1-D input, scalar output
        x_host = ValueOrDie(Quantized({17}, gen, 2.0).To(dt));
      } else {
        x_host = ValueOrDie(Quantized({3, 1001}, gen, 2.0).To(dt));
      }
      if (variant == 3) {  // the first NaN wins (CPU order: NaN first), a row of -inf picks 0
        std::vector<float> v = ValueOrDie(x_host.ToFloatVector());
        v[1 * 1001 + 500] = -std::numeric_limits<float>::quiet_NaN();
        v[1 * 1001 + 700] = std::numeric_limits<float>::quiet_NaN();
        for (int j = 0; j < 1001; ++j) v[2 * 1001 + j] = -std::numeric_limits<float>::infinity();
        x_host = ValueOrDie(Tensor::FromVector(v, {3, 1001}, dt));
      }
      const Pair x = PairFrom(x_host);
      Shape out_shape = x_host.shape();
      out_shape.pop_back();
      Pair out = OutputPair(out_shape, DType::kI64);
      CCTUNE_ASSERT_OK(ops::Argmax(out.cpu, x.cpu));
      CCTUNE_ASSERT_OK(ops::Argmax(out.gpu, x.gpu));
      EXPECT_TRUE(AllEqual(out.gpu, out.cpu)) << DTypeName(dt) << " variant " << variant;
    }
  }
}

TEST_F(CudaOpsTest, TopKMatchesCpuExactly) {
  Generator gen(41);
  struct Case {
    Shape shape;
    int64_t k;
  };
  for (DType dt : kFloats) {
    for (const Case& c : {Case{{3, 500}, 1}, Case{{3, 500}, 7}, Case{{3, 500}, 500},
                          Case{{1, 5000}, 40}, Case{{4, 32000}, 50}, Case{{2, 3, 9}, 4}}) {
      for (bool strided : {false, true}) {
        Tensor x_host = ValueOrDie(Quantized(c.shape, gen, 3.0).To(dt));
        if (strided) {  // the same values through a transposed buffer
          Shape flipped = c.shape;
          std::swap(flipped.front(), flipped.back());
          CCTUNE_ASSERT_OK_AND_ASSIGN(Tensor buf, Tensor::Empty(flipped, dt));
          CCTUNE_ASSERT_OK_AND_ASSIGN(Tensor view, buf.Transpose(0, -1));
          CCTUNE_ASSERT_OK(view.CopyFrom(x_host));
          x_host = view;
        }
        if (c.shape == Shape{3, 500}) {  // NaNs come first, ties by index
          CCTUNE_ASSERT_OK_AND_ASSIGN(Tensor row, x_host.Select(0, 1));
          CCTUNE_ASSERT_OK_AND_ASSIGN(Tensor e1, row.Narrow(0, 300, 1));
          CCTUNE_ASSERT_OK_AND_ASSIGN(Tensor e2, row.Narrow(0, 20, 1));
          // Both signs: a negative NaN's bits order below -inf, yet it must come first too.
          const Tensor nan = ValueOrDie(Tensor::Full({1}, std::nan(""), dt));
          const Tensor neg_nan = ValueOrDie(Tensor::Full({1}, -std::nan(""), dt));
          CCTUNE_ASSERT_OK(e1.CopyFrom(neg_nan));
          CCTUNE_ASSERT_OK(e2.CopyFrom(nan));
        }
        // Both sides read the same (possibly strided) layout.
        Pair x;
        x.cpu = x_host;
        CCTUNE_ASSERT_OK_AND_ASSIGN(Tensor base_gpu, x_host.To(Device::Cuda(0)));
        x.gpu = base_gpu;
        if (strided) {
          CCTUNE_ASSERT_OK_AND_ASSIGN(Tensor t, x_host.Transpose(0, -1));
          CCTUNE_ASSERT_OK_AND_ASSIGN(Tensor tg, t.Contiguous());
          CCTUNE_ASSERT_OK_AND_ASSIGN(Tensor g, tg.To(Device::Cuda(0)));
          CCTUNE_ASSERT_OK_AND_ASSIGN(x.gpu, g.Transpose(0, -1));
        }
        const Shape vshape = Append(Shape(c.shape.begin(), c.shape.end() - 1), c.k);
        Pair values = OutputPair(vshape, dt);
        Pair indices = OutputPair(vshape, DType::kI64);
        CCTUNE_ASSERT_OK(ops::TopK(values.cpu, indices.cpu, x.cpu, c.k));
        CCTUNE_ASSERT_OK(ops::TopK(values.gpu, indices.gpu, x.gpu, c.k));
        const std::string ctx = absl::StrCat(DTypeName(dt), " ", ShapeToString(c.shape), " k ", c.k,
                                             " strided ", strided);
        EXPECT_TRUE(AllEqual(indices.gpu, indices.cpu)) << ctx;
        EXPECT_TRUE(AllEqual(values.gpu, values.cpu)) << ctx;
      }
    }
  }
}

TEST_F(CudaOpsTest, SampleDrawsExactlyWhatTheCpuDraws) {
  Generator data_gen(42);
  const ops::SamplingParams params_list[] = {
      {1.0f, 0, 1.0f}, {0.8f, 40, 1.0f}, {0.7f, 0, 0.9f}, {1.2f, 50, 0.8f}, {0.f, 0, 1.0f}};
  for (DType dt : kFloats) {
    for (bool strided : {false, true}) {
      const Pair logits = strided
                              ? ViewPair(RandomPair({1000, 4}, dt, data_gen, 3.0), Transpose(0, 1))
                              : RandomPair({4, 1000}, dt, data_gen, 3.0);
      for (const ops::SamplingParams& params : params_list) {
        Generator cpu_gen(7), gpu_gen(7);
        for (int step = 0; step < 3; ++step) {
          Pair out = OutputPair({4}, DType::kI64);
          CCTUNE_ASSERT_OK(ops::Sample(out.cpu, logits.cpu, params, cpu_gen));
          CCTUNE_ASSERT_OK(ops::Sample(out.gpu, logits.gpu, params, gpu_gen));
          EXPECT_TRUE(AllEqual(out.gpu, out.cpu))
              << DTypeName(dt) << " temperature " << params.temperature << " top_k " << params.top_k
              << " top_p " << params.top_p << " step " << step;
          EXPECT_EQ(gpu_gen.offset(), cpu_gen.offset());
        }
        if (params.temperature == 0.f) {
          EXPECT_EQ(gpu_gen.offset(), 0u);
        }
      }
    }
  }
}

}  // namespace
}  // namespace cctune
