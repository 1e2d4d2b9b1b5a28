#include "kernels/cpu/quant/quant.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/random.h"
#include "gtest/gtest.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/isa_test_util.h"

namespace cctune::cpu {
namespace {

using quant_internal::QuantIsa;

constexpr double kEps32 = 1.0 / (1 << 23);

// A quantized weight with its storage.
struct Quantized {
  QuantMatrix view;
  std::vector<uint8_t> data;
  std::vector<float> scales;
  std::vector<bf16> scales4, zeros4;
};

std::vector<float> RandomMatrix(int64_t rows, int64_t cols, Generator& gen, double bound = 1.0) {
  std::vector<float> v(rows * cols);
  for (float& x : v) x = static_cast<float>(bound * (2.0 * gen.Uniform() - 1.0));
  return v;
}

Quantized Quantize(QuantFormat format, int64_t n, int64_t k, int64_t groupsize,
                   const std::vector<float>& w) {
  Quantized q;
  q.view.format = format;
  q.view.n = n;
  q.view.k = k;
  if (format == QuantFormat::kInt8PerChannel) {
    q.data.resize(std::max<int64_t>(n * Int8RowBytes(k), 1));
    q.scales.resize(std::max<int64_t>(n, 1));
    QuantizeInt8(n, k, w.data(), DType::kF32, k, q.data.data(), q.scales.data());
  } else {
    const int64_t groups = Int4Groups(k, groupsize);
    q.view.groupsize = groupsize;
    q.data.resize(std::max<int64_t>(n * Int4RowBytes(k), 1));
    q.scales4.resize(std::max<int64_t>(n * groups, 1));
    q.zeros4.resize(std::max<int64_t>(n * groups, 1));
    QuantizeInt4(n, k, groupsize, w.data(), DType::kF32, k, q.data.data(), q.scales4.data(),
                 q.zeros4.data());
  }
  q.view.data = q.data.data();
  q.view.scales = q.scales.data();
  q.view.scales4 = q.scales4.data();
  q.view.zeros4 = q.zeros4.data();
  return q;
}

// The stored value of W[j, i] in fp64, read from the documented layout (independent of
// Dequantize), and the magnitude of the terms the kernel sums for it.
struct Element {
  double value;
  double magnitude;
};
Element StoredElement(const Quantized& q, int64_t j, int64_t i) {
  const QuantMatrix& w = q.view;
  if (w.format == QuantFormat::kInt8PerChannel) {
    const int8_t b = static_cast<int8_t>(q.data[j * Int8RowBytes(w.k) + i]);
    const double v = static_cast<double>(b) * q.scales[j];
    return {v, std::fabs(v)};
  }
  const int64_t groups = Int4Groups(w.k, w.groupsize), g = i / w.groupsize;
  const uint8_t byte = q.data[j * Int4RowBytes(w.k) + (i / 32) * 16 + (i % 32) % 16];
  const int nib = (i % 32) < 16 ? (byte & 15) : (byte >> 4);
  const double s = Bf16ToFloat(q.scales4[j * groups + g]);
  const double z = Bf16ToFloat(q.zeros4[j * groups + g]);
  return {(nib - 8) * s + z, 16 * s + std::fabs(z) + std::fabs((nib - 8) * s + z)};
}

TEST(QuantizeTest, Int8ErrorIsAtMostHalfAStep) {
  Generator gen(1);
  for (int64_t k : {1, 3, 64, 129}) {
    const int64_t n = 7;
    std::vector<float> w = RandomMatrix(n, k, gen, 3.0);
    w[0] = 0.f;
    if (k > 1) std::fill(w.begin() + k, w.begin() + 2 * k, 0.f);  // an all-zero row
    const Quantized q = Quantize(QuantFormat::kInt8PerChannel, n, k, 0, w);
    for (int64_t j = 0; j < n; ++j) {
      double amax = 0;
      for (int64_t i = 0; i < k; ++i) amax = std::max(amax, std::fabs(double{w[j * k + i]}));
      EXPECT_FLOAT_EQ(q.scales[j], amax > 0 ? static_cast<float>(amax / 127) : 1.f) << j;
      for (int64_t i = 0; i < k; ++i) {
        const double err = std::fabs(StoredElement(q, j, i).value - w[j * k + i]);
        ASSERT_LE(err, 0.5 * q.scales[j] * (1 + 1e-5)) << "k " << k << " row " << j << " col " << i;
        EXPECT_GE(static_cast<int8_t>(q.data[j * Int8RowBytes(k) + i]), -127);
      }
      for (int64_t i = k; i < Int8RowBytes(k); ++i) EXPECT_EQ(q.data[j * Int8RowBytes(k) + i], 0);
    }
  }
}

// From the format: the grid min + q·s (q = 0..15) with bf16-rounded s and z covers the group's
// [min, max] up to the rounding of s (15 steps of 2^-9 relative) and of z (2^-9 relative).
TEST(QuantizeTest, Int4ErrorIsBoundedByTheGroupStep) {
  Generator gen(2);
  for (int64_t groupsize : {32, 64, 128, 256}) {
    for (int64_t k : {1, 31, 32, 33, 100, 256, 300}) {
      const int64_t n = 5;
      std::vector<float> w = RandomMatrix(n, k, gen, 2.0);
      for (int64_t i = 0; i < k; ++i) w[i] = 0.25f;  // a constant row: scale clamps to 1e-6/15
      const Quantized q = Quantize(QuantFormat::kInt4Grouped, n, k, groupsize, w);
      const int64_t groups = Int4Groups(k, groupsize);
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t i = 0; i < k; ++i) {
          const int64_t g = i / groupsize;
          const double s = Bf16ToFloat(q.scales4[j * groups + g]);
          const double z = Bf16ToFloat(q.zeros4[j * groups + g]);
          const double bound = 0.5 * s + std::ldexp(std::fabs(z), -8) + std::ldexp(s, -5) + 1e-6;
          ASSERT_LE(std::fabs(StoredElement(q, j, i).value - w[j * k + i]), bound)
              << "groupsize " << groupsize << " k " << k << " row " << j << " col " << i;
        }
      }
    }
  }
}

TEST(QuantizeTest, Bf16AndF16InputsQuantizeAsTheirF32Values) {
  Generator gen(3);
  const int64_t n = 4, k = 96;
  std::vector<float> w = RandomMatrix(n, k, gen);
  std::vector<bf16> wb(n * k);
  std::vector<f16> wh(n * k);
  for (int64_t i = 0; i < n * k; ++i) {
    wb[i] = FloatToBf16(w[i]);
    w[i] = Bf16ToFloat(wb[i]);
    wh[i] = FloatToF16(w[i]);  // bf16 values with 8 mantissa bits are exact in f16 here
  }
  const Quantized ref = Quantize(QuantFormat::kInt4Grouped, n, k, 32, w);
  for (const void* src : {static_cast<const void*>(wb.data()), static_cast<const void*>(wh.data())}) {
    const DType t = src == wb.data() ? DType::kBF16 : DType::kF16;
    std::vector<uint8_t> data(n * Int4RowBytes(k));
    std::vector<bf16> s(n * 3), z(n * 3);
    QuantizeInt4(n, k, 32, src, t, k, data.data(), s.data(), z.data());
    EXPECT_EQ(data, ref.data) << DTypeName(t);
    std::vector<uint8_t> d8(n * Int8RowBytes(k));
    std::vector<float> s8(n);
    QuantizeInt8(n, k, src, t, k, d8.data(), s8.data());
    const Quantized ref8 = Quantize(QuantFormat::kInt8PerChannel, n, k, 0, w);
    EXPECT_EQ(d8, ref8.data) << DTypeName(t);
    EXPECT_EQ(s8, ref8.scales) << DTypeName(t);
  }
}

TEST(DequantizeTest, MatchesTheDocumentedLayout) {
  Generator gen(4);
  for (QuantFormat f : {QuantFormat::kInt8PerChannel, QuantFormat::kInt4Grouped}) {
    for (int64_t k : {1, 33, 200}) {
      const int64_t n = 6, ldo = k + 3;
      const Quantized q = Quantize(f, n, k, 64, RandomMatrix(n, k, gen));
      std::vector<float> out(4 * ldo, std::numeric_limits<float>::quiet_NaN());
      Dequantize(q.view, 2, 4, out.data(), ldo);
      for (int64_t r = 0; r < 4; ++r) {
        for (int64_t i = 0; i < k; ++i) {
          const double want = StoredElement(q, 2 + r, i).value;
          ASSERT_NEAR(out[r * ldo + i], want, 2 * kEps32 * (std::fabs(want) + 1e-30) + 1e-7)
              << r << " " << i;
        }
        for (int64_t i = k; i < ldo; ++i) EXPECT_TRUE(std::isnan(out[r * ldo + i]));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// GEMM against an fp64 reference at every ISA level.

struct Case {
  int64_t m, n, k, groupsize;
};

std::string CaseName(QuantFormat f, const Case& c) {
  return absl::StrCat(f == QuantFormat::kInt8PerChannel ? "int8" : "int4", " m=", c.m, " n=", c.n,
                      " k=", c.k, " groupsize=", c.groupsize);
}

enum class Path { kStream, kPanel, kPublic };

void CheckGemm(QuantFormat f, const Case& c, Path path, Generator& gen) {
  SCOPED_TRACE(CaseName(f, c));
  const Quantized q = Quantize(f, c.n, c.k, c.groupsize, RandomMatrix(c.n, c.k, gen));
  // A with NaN padding past each row: reading past k poisons the result.
  const int64_t lda = c.k + 5, ldc = c.n + 2;
  std::vector<float> a(c.m * lda, std::numeric_limits<float>::quiet_NaN());
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t t = 0; t < c.k; ++t) a[i * lda + t] = static_cast<float>(2.0 * gen.Uniform() - 1.0);
  }
  std::vector<float> out(c.m * ldc, std::numeric_limits<float>::quiet_NaN());
  switch (path) {
    case Path::kStream:
      quant_internal::StreamQuantGemmNT(quant_internal::BestQuantIsa(), c.m, a.data(), lda, q.view,
                                        out.data(), ldc);
      break;
    case Path::kPanel:
      quant_internal::PanelQuantGemmNT(c.m, a.data(), lda, q.view, out.data(), ldc);
      break;
    case Path::kPublic:
      QuantGemmNT(c.m, a.data(), lda, q.view, out.data(), ldc);
      break;
  }
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      double want = 0, mag = 0;
      for (int64_t t = 0; t < c.k; ++t) {
        const Element e = StoredElement(q, j, t);
        want += a[i * lda + t] * e.value;
        mag += std::fabs(a[i * lda + t]) * e.magnitude;
      }
      // f32 sums of k products, each term bounded by `mag`.
      const double tol = (c.k + 16) * kEps32 * mag + 1e-30;
      ASSERT_NEAR(out[i * ldc + j], want, tol) << "row " << i << " col " << j;
    }
    for (int64_t j = c.n; j < ldc; ++j) EXPECT_TRUE(std::isnan(out[i * ldc + j])) << j;
  }
}

const Case kCases[] = {
    {1, 1, 1, 32},      {1, 17, 31, 32},    {1, 40, 32, 32},     {2, 33, 33, 32},
    {3, 16, 100, 64},   {4, 9, 257, 128},   {5, 24, 1000, 256},  {1, 70, 512, 256},
    {7, 19, 300, 64},   {8, 64, 160, 32},   {1, 300, 2048, 128}, {2, 128, 4096, 32},
};

class QuantGemmLevelTest : public testing::IsaLevelTest {};

TEST_P(QuantGemmLevelTest, StreamingMatchesFp64) {
  Generator gen(10 + static_cast<int>(GetParam()));
  for (QuantFormat f : {QuantFormat::kInt8PerChannel, QuantFormat::kInt4Grouped}) {
    for (const Case& c : kCases) CheckGemm(f, c, Path::kStream, gen);
  }
}

TEST_P(QuantGemmLevelTest, PanelAndDispatchMatchFp64) {
  Generator gen(20 + static_cast<int>(GetParam()));
  const Case big[] = {{9, 40, 100, 32}, {33, 65, 257, 64}, {130, 24, 96, 32}};
  for (QuantFormat f : {QuantFormat::kInt8PerChannel, QuantFormat::kInt4Grouped}) {
    for (const Case& c : kCases) CheckGemm(f, c, Path::kPanel, gen);
    for (const Case& c : big) {
      CheckGemm(f, c, Path::kPanel, gen);
      // The public entry with f32 activations: the panels above kMaxStreamRows rows.
      SetQuantActivations(QuantActivations::kF32);
      CheckGemm(f, c, Path::kPublic, gen);
      SetQuantActivations(QuantActivations::kInt8);
    }
  }
}

TEST_P(QuantGemmLevelTest, DispatchFollowsTheLevel) {
  const QuantIsa want = GetParam() >= IsaLevel::kAvx512 ? QuantIsa::kAvx512
                        : GetParam() == IsaLevel::kAvx2 ? QuantIsa::kAvx2
                                                        : QuantIsa::kScalar;
  EXPECT_EQ(quant_internal::BestQuantIsa(), want) << quant_internal::QuantIsaName(want);
}

// ---------------------------------------------------------------------------------------------
// Int8 activations (the decode path for int8 weights): the activations' quantization, then each
// path against fp64 sums of the same quantized values, at every ISA level.

// The documented scheme, independently: per block of 64, d = max|x| / 127 (1 if all zero),
// q = clamp(round-half-even(x / d), -127, 127).
struct RefActs {
  std::vector<int> q;   // [m, k]
  std::vector<double> d;  // [m, blocks]
  int64_t blocks;
};
RefActs ReferenceActs(int64_t m, int64_t k, const std::vector<float>& a, int64_t lda) {
  RefActs r;
  r.blocks = (k + kActBlock - 1) / kActBlock;
  r.q.resize(m * k);
  r.d.resize(m * r.blocks);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t b = 0; b < r.blocks; ++b) {
      float amax = 0.f;
      for (int64_t t = b * kActBlock; t < std::min(k, (b + 1) * kActBlock); ++t) {
        amax = std::max(amax, std::fabs(a[i * lda + t]));
      }
      const float d = amax > 0.f ? amax / 127.f : 1.f;
      r.d[i * r.blocks + b] = d;
      for (int64_t t = b * kActBlock; t < std::min(k, (b + 1) * kActBlock); ++t) {
        r.q[i * k + t] = static_cast<int>(
            std::clamp(std::nearbyint(a[i * lda + t] * (1.f / d)), -127.f, 127.f));
      }
    }
  }
  return r;
}

TEST(QuantizeActivationsTest, MatchesTheDocumentedScheme) {
  Generator gen(30);
  for (int64_t k : {1, 63, 64, 65, 200}) {
    const int64_t m = 3, lda = k + 2, blocks = (k + 63) / 64, ldq = blocks * 64 + 8;
    std::vector<float> a(m * lda);
    for (float& x : a) x = static_cast<float>(4.0 * gen.Uniform() - 2.0);
    for (int64_t t = 0; t < std::min<int64_t>(k, 64); ++t) a[lda + t] = 0.f;  // an all-zero block
    const RefActs ref = ReferenceActs(m, k, a, lda);
    for (bool biased : {false, true}) {
      std::vector<int8_t> q(m * ldq, 99);
      std::vector<float> d(m * blocks);
      QuantizeActivations(m, k, a.data(), lda, biased, q.data(), ldq, d.data(), blocks);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t b = 0; b < blocks; ++b) EXPECT_EQ(d[i * blocks + b], ref.d[i * blocks + b]);
        for (int64_t t = 0; t < k; ++t) {
          const int got = biased ? static_cast<int>(static_cast<uint8_t>(q[i * ldq + t])) - 128
                                 : q[i * ldq + t];
          ASSERT_EQ(got, ref.q[i * k + t]) << "k " << k << " row " << i << " col " << t;
        }
        // Padding to the block: the value 0.
        for (int64_t t = k; t < ldq; ++t) {
          EXPECT_EQ(static_cast<uint8_t>(q[i * ldq + t]), biased ? 128 : 0) << t;
        }
      }
      EXPECT_EQ(d[blocks], 1.f);  // the all-zero block
    }
  }
}

using quant_internal::Int8ActIsa;

std::vector<Int8ActIsa> Int8ActPathsUpTo(IsaLevel level) {
  std::vector<Int8ActIsa> paths = {Int8ActIsa::kScalar};
  if (level >= IsaLevel::kAvx2) paths.push_back(Int8ActIsa::kAvx2);
  if (quant_internal::BestInt8ActIsa() == Int8ActIsa::kAvx512Vnni) {
    paths.push_back(Int8ActIsa::kAvx512Vnni);
  }
  return paths;
}

void CheckInt8Act(Int8ActIsa isa, const Case& c, Generator& gen) {
  SCOPED_TRACE(absl::StrCat(quant_internal::Int8ActIsaName(isa), " ",
                            CaseName(QuantFormat::kInt8PerChannel, c)));
  const Quantized q =
      Quantize(QuantFormat::kInt8PerChannel, c.n, c.k, 0, RandomMatrix(c.n, c.k, gen));
  const int64_t lda = c.k + 5, ldc = c.n + 2;
  std::vector<float> a(c.m * lda, std::numeric_limits<float>::quiet_NaN());
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t t = 0; t < c.k; ++t) a[i * lda + t] = static_cast<float>(2.0 * gen.Uniform() - 1.0);
  }
  std::vector<float> out(c.m * ldc, std::numeric_limits<float>::quiet_NaN());
  quant_internal::StreamInt8ActGemmNT(isa, c.m, a.data(), lda, q.view, out.data(), ldc);
  const RefActs x = ReferenceActs(c.m, c.k, a, lda);
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      // The same quantized values summed in fp64 (the integer block sums are exact in the
      // kernel; what differs is the f32 rounding of the block terms and their sum) ...
      double want = 0, mag = 0, exact = 0, act_err = 0;
      for (int64_t t = 0; t < c.k; ++t) {
        const double w = StoredElement(q, j, t).value;
        const double d = x.d[i * x.blocks + t / kActBlock];
        want += x.q[i * c.k + t] * d * w;
        mag += std::fabs(x.q[i * c.k + t] * d * w);
        // ... and against f32 activations: each is off by at most half a step d / 2.
        exact += a[i * lda + t] * w;
        act_err += 0.5 * d * std::fabs(w);
      }
      const double tol = (x.blocks + 16) * kEps32 * mag + 1e-30;
      ASSERT_NEAR(out[i * ldc + j], want, tol) << "row " << i << " col " << j;
      ASSERT_NEAR(out[i * ldc + j], exact, act_err * (1 + 1e-5) + tol) << "row " << i << " col " << j;
    }
    for (int64_t j = c.n; j < ldc; ++j) EXPECT_TRUE(std::isnan(out[i * ldc + j])) << j;
  }
}

TEST_P(QuantGemmLevelTest, Int8ActivationsMatchFp64OfTheQuantizedValues) {
  Generator gen(40 + static_cast<int>(GetParam()));
  const Case more[] = {{1, 20, 64, 0},    {1, 20, 65, 0}, {2, 17, 129, 0}, {6, 33, 8192, 0},
                       {70, 9, 8192, 0}};  // 70 rows of 8 KiB: three row blocks
  for (Int8ActIsa isa : Int8ActPathsUpTo(GetParam())) {
    for (const Case& c : kCases) CheckInt8Act(isa, c, gen);
    for (const Case& c : more) CheckInt8Act(isa, c, gen);
  }
}

TEST_P(QuantGemmLevelTest, Int8ActivationDispatchFollowsTheLevel) {
  const Int8ActIsa got = quant_internal::BestInt8ActIsa();
  if (GetParam() >= IsaLevel::kAvx512 && __builtin_cpu_supports("avx512vnni")) {
    EXPECT_EQ(got, Int8ActIsa::kAvx512Vnni);
  } else if (GetParam() >= IsaLevel::kAvx2) {
    EXPECT_EQ(got, Int8ActIsa::kAvx2);
  } else {
    EXPECT_EQ(got, Int8ActIsa::kScalar);
  }
}

// Int4 weights with int8 activations: against fp64 sums of the stored int4 weights times the
// same quantized activations (the kernel's result up to f32 rounding), and against the f32
// activations within the activations' rounding, Σ |w| · d / 2. Ragged shapes: k not a multiple
// of the group, the block of 32, the activation block of 64 or the VNNI kernel's span of 128;
// groupsizes that are not multiples of 128 (a span holds blocks of several groups), rows that
// end in a span of 1, 2 or 3 blocks.
void CheckInt4Act(Int8ActIsa isa, const Case& c, Generator& gen) {
  SCOPED_TRACE(absl::StrCat(quant_internal::Int8ActIsaName(isa), " ",
                            CaseName(QuantFormat::kInt4Grouped, c)));
  const Quantized q =
      Quantize(QuantFormat::kInt4Grouped, c.n, c.k, c.groupsize, RandomMatrix(c.n, c.k, gen));
  const int64_t lda = c.k + 5, ldc = c.n + 2;
  std::vector<float> a(c.m * lda, std::numeric_limits<float>::quiet_NaN());
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t t = 0; t < c.k; ++t) a[i * lda + t] = static_cast<float>(2.0 * gen.Uniform() - 1.0);
  }
  std::vector<float> out(c.m * ldc, std::numeric_limits<float>::quiet_NaN());
  quant_internal::StreamInt4ActGemmNT(isa, c.m, a.data(), lda, q.view, out.data(), ldc);
  const RefActs x = ReferenceActs(c.m, c.k, a, lda);
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      double want = 0, mag = 0, exact = 0, act_err = 0;
      for (int64_t t = 0; t < c.k; ++t) {
        const Element e = StoredElement(q, j, t);
        const double xq = x.q[i * c.k + t] * x.d[i * x.blocks + t / kActBlock];
        want += xq * e.value;
        mag += std::fabs(xq) * e.magnitude;
        exact += a[i * lda + t] * e.value;
        act_err += 0.5 * x.d[i * x.blocks + t / kActBlock] * std::fabs(e.value);
      }
      // f32: a product and a sum per block of 32, a few per group, the lane sums.
      const double tol = (c.k / 32 + 32) * kEps32 * mag + 1e-30;
      ASSERT_NEAR(out[i * ldc + j], want, tol) << "row " << i << " col " << j;
      ASSERT_NEAR(out[i * ldc + j], exact, act_err * (1 + 1e-5) + tol) << "row " << i << " col " << j;
    }
    for (int64_t j = c.n; j < ldc; ++j) EXPECT_TRUE(std::isnan(out[i * ldc + j])) << j;
  }
}

TEST_P(QuantGemmLevelTest, Int4Int8ActivationsMatchFp64OfTheQuantizedValues) {
  Generator gen(60 + static_cast<int>(GetParam()));
  const Case more[] = {{1, 21, 64, 32},   {1, 20, 65, 64},    {2, 17, 129, 96},
                       {3, 18, 300, 160}, {1, 33, 700, 224},  {4, 16, 2048, 256},
                       {6, 33, 1376, 128}, {8, 40, 96, 64},   {5, 12, 3000, 32},
                       {2, 19, 500, 192},  {1, 24, 4100, 64},  {3, 9, 390, 128},
                       {70, 10, 8192, 256}};  // 70 rows of 8 KiB: three row blocks
  for (Int8ActIsa isa : Int8ActPathsUpTo(GetParam())) {
    for (const Case& c : kCases) CheckInt4Act(isa, c, gen);
    for (const Case& c : more) CheckInt4Act(isa, c, gen);
  }
}

// Every path sums the same integers: they agree with each other far inside the bound above.
TEST_P(QuantGemmLevelTest, Int4Int8ActivationPathsAgree) {
  Generator gen(70);
  for (int64_t groupsize : {32, 64, 96, 128, 192, 256}) {
    const int64_t m = 3, n = 37, k = 1000;
    const Quantized q =
        Quantize(QuantFormat::kInt4Grouped, n, k, groupsize, RandomMatrix(n, k, gen));
    const std::vector<float> a = RandomMatrix(m, k, gen);
    std::vector<float> ref(m * n), got(m * n);
    quant_internal::StreamInt4ActGemmNT(Int8ActIsa::kScalar, m, a.data(), k, q.view, ref.data(), n);
    for (Int8ActIsa isa : Int8ActPathsUpTo(GetParam())) {
      quant_internal::StreamInt4ActGemmNT(isa, m, a.data(), k, q.view, got.data(), n);
      for (int64_t i = 0; i < m * n; ++i) {
        ASSERT_NEAR(got[i], ref[i], 1e-4 * (1 + std::fabs(ref[i])))
            << quant_internal::Int8ActIsaName(isa) << " groupsize " << groupsize << " " << i;
      }
    }
  }
}

// The public entry: int8 and int4 weights with up to 8 rows take the int8-activation paths by
// default, the f32-activation streaming path under QuantActivations::kF32.
TEST_P(QuantGemmLevelTest, QuantActivationsChoosesThePath) {
  Generator gen(50);
  const int64_t m = 2, n = 48, k = 300;
  const Quantized q = Quantize(QuantFormat::kInt8PerChannel, n, k, 0, RandomMatrix(n, k, gen));
  const std::vector<float> a = RandomMatrix(m, k, gen);
  std::vector<float> got(m * n), want(m * n);
  ASSERT_EQ(GetQuantActivations(), QuantActivations::kInt8);
  QuantGemmNT(m, a.data(), k, q.view, got.data(), n);
  quant_internal::StreamInt8ActGemmNT(quant_internal::BestInt8ActIsa(), m, a.data(), k, q.view,
                                      want.data(), n);
  EXPECT_EQ(got, want);
  SetQuantActivations(QuantActivations::kF32);
  QuantGemmNT(m, a.data(), k, q.view, got.data(), n);
  SetQuantActivations(QuantActivations::kInt8);
  quant_internal::StreamQuantGemmNT(quant_internal::BestQuantIsa(), m, a.data(), k, q.view,
                                    want.data(), n);
  EXPECT_EQ(got, want);
  // Int4 weights the same way.
  const Quantized q4 =
      Quantize(QuantFormat::kInt4Grouped, n, k, 64, RandomMatrix(n, k, gen));
  QuantGemmNT(m, a.data(), k, q4.view, got.data(), n);
  quant_internal::StreamInt4ActGemmNT(quant_internal::BestInt8ActIsa(), m, a.data(), k, q4.view,
                                      want.data(), n);
  EXPECT_EQ(got, want);
  SetQuantActivations(QuantActivations::kF32);
  QuantGemmNT(m, a.data(), k, q4.view, got.data(), n);
  SetQuantActivations(QuantActivations::kInt8);
  quant_internal::StreamQuantGemmNT(quant_internal::BestQuantIsa(), m, a.data(), k, q4.view,
                                    want.data(), n);
  EXPECT_EQ(got, want);
}

// With int8 activations the public entry takes the int8-activation kernels up to
// kMaxInt8ActRows / kMaxInt4ActRows rows of A (decode and short prefills), the panels above.
TEST_P(QuantGemmLevelTest, Int8ActivationKernelsServeUpToTheirRowLimit) {
  Generator gen(80);
  const int64_t n = 40, k = 200;
  for (QuantFormat f : {QuantFormat::kInt8PerChannel, QuantFormat::kInt4Grouped}) {
    const int64_t lim = f == QuantFormat::kInt8PerChannel ? quant_internal::kMaxInt8ActRows
                                                          : quant_internal::kMaxInt4ActRows;
    const Quantized q = Quantize(f, n, k, 64, RandomMatrix(n, k, gen));
    for (int64_t m : {int64_t{9}, int64_t{33}, lim, lim + 1}) {
      SCOPED_TRACE(absl::StrCat(CaseName(f, {m, n, k, 64})));
      const std::vector<float> a = RandomMatrix(m, k, gen);
      std::vector<float> got(m * n), want(m * n);
      QuantGemmNT(m, a.data(), k, q.view, got.data(), n);
      if (m > lim) {
        quant_internal::PanelQuantGemmNT(m, a.data(), k, q.view, want.data(), n);
      } else if (f == QuantFormat::kInt8PerChannel) {
        quant_internal::StreamInt8ActGemmNT(quant_internal::BestInt8ActIsa(), m, a.data(), k,
                                            q.view, want.data(), n);
      } else {
        quant_internal::StreamInt4ActGemmNT(quant_internal::BestInt8ActIsa(), m, a.data(), k,
                                            q.view, want.data(), n);
      }
      EXPECT_EQ(got, want);
    }
  }
}

CCTUNE_INSTANTIATE_ISA_LEVELS(QuantGemmLevelTest);

// Two runs of one path give the same bits; every level agrees with the scalar path within the
// f32 bound (checked above), not bit for bit.
TEST(QuantGemmTest, RepeatedRunsAreBitIdentical) {
  Generator gen(5);
  const int64_t m = 1, n = 96, k = 512;
  const Quantized q = Quantize(QuantFormat::kInt4Grouped, n, k, 64, RandomMatrix(n, k, gen));
  const std::vector<float> a = RandomMatrix(m, k, gen);
  std::vector<float> c1(n), c2(n);
  QuantGemmNT(m, a.data(), k, q.view, c1.data(), n);
  QuantGemmNT(m, a.data(), k, q.view, c2.data(), n);
  EXPECT_EQ(c1, c2);
}

}  // namespace
}  // namespace cctune::cpu
