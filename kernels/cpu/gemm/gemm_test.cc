#include "kernels/cpu/gemm/gemm.h"
#include "kernels/cpu/gemm/amx_gemm.h"

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

using gemm_internal::GemmIsa;

// The ISA level a forced path needs (kAuto and kBlas run anywhere).
IsaLevel LevelOf(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kAvx2:
      return IsaLevel::kAvx2;
    case GemmIsa::kAvx512:
      return IsaLevel::kAvx512;
    case GemmIsa::kAvx512Bf16:
    case GemmIsa::kPackedBf16:
      return IsaLevel::kAvx512Bf16;
    default:
      return IsaLevel::kScalar;
  }
}

// The relative error bound (times sum |a·b|) GemmNTWithIsa(isa) adds by rounding to bf16: the bf16 dot paths
// with bf16 B, the AMX GEMM (f32 or bf16 B; f16 falls back to kPacked), and kAuto where it
// takes the AMX route (the products exact, the sums in f32: on top of the f32 term).
// bf16's unit roundoff is 2^-8 (8 significant bits), per rounded operand; with both A and B
// rounded (AMX, f32 B) the bound is (1 + 2^-8)^2 - 1 < 2^-7 + 2^-16.
double RoundingBound(GemmIsa isa, DType dtype, int64_t m) {
  constexpr double kOne = 1.0 / 256, kBoth = 1.0 / 128 + 1.0 / 65536;
  switch (isa) {
    case GemmIsa::kAvx512Bf16:
    case GemmIsa::kPackedBf16:
      return dtype == DType::kBF16 ? kOne : 0.0;
    case GemmIsa::kAmx:
      return dtype == DType::kBF16 ? kOne : dtype == DType::kF32 ? kBoth : 0.0;
    case GemmIsa::kAuto:
      return dtype == DType::kBF16 && gemm_internal::AutoBf16Route(m) != GemmIsa::kAuto ? kOne
                                                                                         : 0.0;
    default:
      return 0.0;
  }
}

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr double kEps32 = 1.0 / (1 << 23);

// A [rows, cols] matrix with row stride ld in a buffer of `dtype`; the padding past each row
// holds NaN, so a kernel that reads it poisons its result.
struct Matrix {
  int64_t rows = 0, cols = 0, ld = 0;
  DType dtype = DType::kF32;
  std::vector<uint8_t> bytes;
  std::vector<double> values;  // the stored (rounded) values, [rows, cols] contiguous

  Matrix(int64_t r, int64_t c, int64_t ld_, DType t) : rows(r), cols(c), ld(ld_), dtype(t) {
    bytes.resize(static_cast<size_t>(std::max<int64_t>(r * ld, 1)) * DTypeSize(t));
    for (int64_t i = 0; i < r * ld; ++i) StoreFromDouble(bytes.data(), t, i, kNaN);
  }
  void Fill(Generator& gen) {
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        StoreFromDouble(bytes.data(), dtype, i * ld + j, 2.0 * gen.Uniform() - 1.0);
      }
    }
    values.resize(rows * cols);
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) values[i * cols + j] = Load(i, j);
    }
  }
  // The stored (already rounded) value, read from the buffer.
  double Load(int64_t i, int64_t j) const { return LoadAsDouble(bytes.data(), dtype, i * ld + j); }
  // The value written by Fill.
  double at(int64_t i, int64_t j) const { return values[i * cols + j]; }
  void* data() { return bytes.data(); }
  float* f32() { return reinterpret_cast<float*>(bytes.data()); }
};

// Checks C against ref within tol * scale (per element), and that C's padding is untouched.
void ExpectNear(const Matrix& c, const std::vector<double>& ref, const std::vector<double>& scale,
                double tol, const std::string& what) {
  int failures = 0;
  for (int64_t i = 0; i < c.rows; ++i) {
    for (int64_t j = 0; j < c.ld; ++j) {
      const double got = c.Load(i, j);
      if (j >= c.cols) {
        if (!std::isnan(got) && failures++ < 5) {
          ADD_FAILURE() << what << ": padding C[" << i << ", " << j << "] was written (" << got
                        << ")";
        }
        continue;
      }
      const double want = ref[i * c.cols + j];
      const double bound = tol * scale[i * c.cols + j] + 1e-30;
      if (!(std::fabs(got - want) <= bound) && failures++ < 5) {
        ADD_FAILURE() << what << ": C[" << i << ", " << j << "] = " << got << ", want " << want
                      << " (|diff| " << std::fabs(got - want) << " > " << bound << ")";
      }
    }
  }
  EXPECT_EQ(failures, 0) << what;
}

// ---- GemmNT ----

class GemmNTTest : public ::testing::TestWithParam<std::tuple<GemmIsa, DType>> {};

TEST_P(GemmNTTest, MatchesFp64Reference) {
  const auto [isa, dtype] = GetParam();
  CCTUNE_SKIP_UNLESS_ISA(LevelOf(isa));
  if (isa == GemmIsa::kAmx && !AmxBf16Available()) GTEST_SKIP() << "no AMX-BF16 here";
  ASSERT_TRUE(gemm_internal::GemmIsaSupported(isa));
  Generator gen(1234);
  int cases = 0;
  for (int64_t m : {1, 2, 3, 7, 64}) {
    for (int64_t n : {1, 3, 17, 129, 1000}) {
      for (int64_t k : {1, 3, 17, 64, 129, 1000}) {
        if (m * n * k > 2'100'000) continue;  // keeps the fp64 reference cheap
        // (beta, padded strides): C's padding and the unused C values (beta 0) hold NaN.
        for (auto [beta, pad] : {std::pair<float, int64_t>{0.f, 3}, {1.f, 5}, {0.5f, 0}}) {
          Matrix a(m, k, k + pad, DType::kF32), b(n, k, k + 2 * pad + (pad ? 1 : 0), dtype);
          Matrix c(m, n, n + pad, DType::kF32);
          a.Fill(gen);
          b.Fill(gen);
          if (beta != 0.f) c.Fill(gen);
          std::vector<double> ref(m * n), scale(m * n);
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < n; ++j) {
              double s = 0, abs_sum = 0;
              for (int64_t q = 0; q < k; ++q) {
                const double p = a.at(i, q) * b.at(j, q);
                s += p;
                abs_sum += std::fabs(p);
              }
              const double c0 = beta != 0.f ? beta * c.at(i, j) : 0.0;
              ref[i * n + j] = s + c0;
              scale[i * n + j] = abs_sum + std::fabs(c0);
            }
          }
          gemm_internal::GemmNTWithIsa(isa, m, n, k, a.f32(), a.ld, b.data(), dtype, b.ld, c.f32(),
                                       c.ld, beta);
          const double tol =
              kEps32 * (k / 4.0 + 8.0) + RoundingBound(isa, dtype, m);
          ExpectNear(c, ref, scale, tol,
                     absl::StrCat(gemm_internal::GemmIsaName(isa), " ", DTypeName(dtype), " m=", m,
                                  " n=", n, " k=", k, " beta=", beta, " pad=", pad));
          if (HasFailure()) return;
          ++cases;
        }
      }
    }
  }
  EXPECT_GT(cases, 250);
}

INSTANTIATE_TEST_SUITE_P(
    AllPaths, GemmNTTest,
    ::testing::Combine(::testing::Values(GemmIsa::kAuto, GemmIsa::kScalar, GemmIsa::kAvx2,
                                         GemmIsa::kAvx512, GemmIsa::kAvx512Bf16, GemmIsa::kBlas,
                                         GemmIsa::kPacked, GemmIsa::kPackedBf16,
                                         GemmIsa::kAmx),
                       ::testing::Values(DType::kF32, DType::kBF16, DType::kF16)),
    [](const ::testing::TestParamInfo<std::tuple<GemmIsa, DType>>& info) {
      return absl::StrCat(gemm_internal::GemmIsaName(std::get<0>(info.param)), "_",
                          DTypeName(std::get<1>(info.param)));
    });

// Checks GemmNTWithIsa(isa, ...) for one shape against the fp64 reference, beta = 1.
void CheckShape(GemmIsa isa, DType dtype, int64_t m, int64_t n, int64_t k, uint64_t seed) {
  Generator gen(seed);
  Matrix a(m, k, k, DType::kF32), b(n, k, k + 8, dtype), c(m, n, n + 1, DType::kF32);
  a.Fill(gen);
  b.Fill(gen);
  c.Fill(gen);
  std::vector<double> ref(m * n), scale(m * n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0, abs_sum = 0;
      for (int64_t q = 0; q < k; ++q) {
        s += a.at(i, q) * b.at(j, q);
        abs_sum += std::fabs(a.at(i, q) * b.at(j, q));
      }
      ref[i * n + j] = s + c.at(i, j);
      scale[i * n + j] = abs_sum + std::fabs(c.at(i, j));
    }
  }
  gemm_internal::GemmNTWithIsa(isa, m, n, k, a.f32(), a.ld, b.data(), dtype, b.ld, c.f32(), c.ld,
                               1.f);
  ExpectNear(c, ref, scale,
             kEps32 * (k / 4.0 + 8.0) + RoundingBound(isa, dtype, m),
             absl::StrCat(gemm_internal::GemmIsaName(isa), " ", DTypeName(dtype), " m=", m,
                          " n=", n, " k=", k));
}

// Checks SgemmStrided for one shape against the fp64 reference.
void CheckSgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float beta,
                uint64_t seed) {
  Generator gen(seed);
  // Stored shapes: A [m, k] or [k, m]; B [k, n] or [n, k].
  Matrix a = trans_a ? Matrix(k, m, m + 3, DType::kF32) : Matrix(m, k, k + 3, DType::kF32);
  Matrix b = trans_b ? Matrix(n, k, k + 2, DType::kF32) : Matrix(k, n, n + 2, DType::kF32);
  Matrix c(m, n, n + 1, DType::kF32);
  a.Fill(gen);
  b.Fill(gen);
  if (beta != 0.f) c.Fill(gen);
  std::vector<double> ref(m * n), scale(m * n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0, abs_sum = 0;
      for (int64_t q = 0; q < k; ++q) {
        const double p = (trans_a ? a.at(q, i) : a.at(i, q)) * (trans_b ? b.at(j, q) : b.at(q, j));
        s += p;
        abs_sum += std::fabs(p);
      }
      const double c0 = beta != 0.f ? beta * c.at(i, j) : 0.0;
      ref[i * n + j] = s + c0;
      scale[i * n + j] = abs_sum + std::fabs(c0);
    }
  }
  SgemmStrided(trans_a, trans_b, m, n, k, a.f32(), a.ld, b.f32(), b.ld, c.f32(), c.ld, beta);
  ExpectNear(c, ref, scale, kEps32 * (k / 4.0 + 8.0),
             absl::StrCat("trans_a=", trans_a, " trans_b=", trans_b, " m=", m, " n=", n, " k=", k,
                          " beta=", beta, " level=", IsaLevelName(ActiveIsaLevel())));
}

// A 16-bit B larger than one f32 panel (256+ rows per thread) takes several panels.
TEST(GemmNTTest, BlasRouteSpansSeveralPanels) {
  CheckShape(GemmIsa::kBlas, DType::kBF16, 20, 600, 4096, 7);
  CheckShape(GemmIsa::kBlas, DType::kF16, 3, 700, 4100, 8);
}

// Enough rows of A (or a large enough A) send kAuto to OpenBLAS.
TEST(GemmNTTest, AutoLargeMatchesReference) {
  CheckShape(GemmIsa::kAuto, DType::kF32, 129, 50, 100, 9);
  CheckShape(GemmIsa::kAuto, DType::kBF16, 257, 33, 65, 10);
  CheckShape(GemmIsa::kAuto, DType::kF16, 40, 19, 60000, 11);  // A is 9.6 MB
}

// GEMV rows longer than L1 holds (k > 4096) take a two-rows-per-pass kernel.
TEST(GemmNTTest, LongRowGemvMatchesReference) {
  uint64_t seed = 20;
  for (GemmIsa isa : {GemmIsa::kAuto, GemmIsa::kAvx512, GemmIsa::kAvx2}) {
    if (!gemm_internal::GemmIsaSupported(isa)) continue;  // the other levels still run
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      CheckShape(isa, dtype, 1, 17, 5003, seed++);
    }
  }
}

TEST(GemmNTTest, ZeroKScalesC) {
  Matrix c(3, 5, 6, DType::kF32);
  Generator gen(3);
  c.Fill(gen);
  std::vector<double> ref(15), scale(15, 1.0);
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 5; ++j) ref[i * 5 + j] = 0.25 * c.at(i, j);
  }
  const float a = 1.f, b = 1.f;
  GemmNT(3, 5, 0, &a, 0, &b, DType::kF32, 0, c.f32(), c.ld, 0.25f);
  ExpectNear(c, ref, scale, 1e-7, "k=0 beta=0.25");
  GemmNT(3, 5, 0, &a, 0, &b, DType::kF32, 0, c.f32(), c.ld, 0.f);
  ExpectNear(c, std::vector<double>(15, 0.0), scale, 0.0, "k=0 beta=0");
}

TEST(GemmNTTest, BestIsaIsSupported) {
  const GemmIsa best = gemm_internal::BestGemmIsa();
  EXPECT_TRUE(gemm_internal::GemmIsaSupported(best)) << gemm_internal::GemmIsaName(best);
  EXPECT_NE(best, GemmIsa::kAuto);
  EXPECT_NE(best, GemmIsa::kAvx512Bf16);  // opt-in only: it rounds A
}

// kAuto at every ISA level the CPU has: the streaming path (small m) at that level, OpenBLAS
// (large m) with that level's 16-bit -> f32 panel conversion.
class GemmAtLevelTest : public testing::IsaLevelTest {};

TEST_P(GemmAtLevelTest, AutoPicksTheLevelsPath) {
  const GemmIsa want = GetParam() == IsaLevel::kScalar ? GemmIsa::kScalar
                       : GetParam() == IsaLevel::kAvx2 ? GemmIsa::kAvx2
                                                       : GemmIsa::kAvx512;
  EXPECT_EQ(gemm_internal::BestGemmIsa(), want);
  for (GemmIsa isa : {GemmIsa::kAvx2, GemmIsa::kAvx512, GemmIsa::kAvx512Bf16}) {
    EXPECT_EQ(gemm_internal::GemmIsaSupported(isa), IsaSupported(LevelOf(isa)))
        << gemm_internal::GemmIsaName(isa);
  }
}

TEST_P(GemmAtLevelTest, AutoMatchesFp64Reference) {
  uint64_t seed = 100;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 33, 5003},
                           {2, 17, 129},
                           {7, 129, 100},
                           {64, 40, 33},
                           {300, 20, 70}}) {
      CheckShape(GemmIsa::kAuto, dtype, m, n, k, seed++);
      if (HasFailure()) return;
    }
  }
}

TEST_P(GemmAtLevelTest, SgemmStridedMatchesFp64Reference) {
  uint64_t seed = 200;
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 129, 17}, {7, 17, 1000}}) {
    CheckSgemm(false, true, m, n, k, 1.f, seed++);
  }
}

// Each large-GEMM route (SetLargeGemmRoute) at each level: SgemmStrided in every transpose
// and GemmNT with f32 B past the streaming rows, against fp64.
TEST_P(GemmAtLevelTest, EveryLargeRouteMatchesFp64Reference) {
  using gemm_internal::SgemmPath;
  uint64_t seed = 300;
  for (SgemmPath route : {SgemmPath::kAuto, SgemmPath::kBlas, SgemmPath::kPacked}) {
    const SgemmPath before = gemm_internal::SetLargeGemmRoute(route);
    EXPECT_EQ(gemm_internal::LargeGemmRoute(), route);
    for (bool trans_a : {false, true}) {
      for (bool trans_b : {false, true}) {
        CheckSgemm(trans_a, trans_b, 150, 70, 45, trans_a ? 1.f : 0.f, seed++);
      }
    }
    CheckShape(GemmIsa::kAuto, DType::kF32, 200, 37, 50, seed++);
    gemm_internal::SetLargeGemmRoute(before);
    if (HasFailure()) return;
  }
}

CCTUNE_INSTANTIATE_ISA_LEVELS(GemmAtLevelTest);

// ---- SgemmStrided ----

class SgemmStridedTest : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(SgemmStridedTest, MatchesFp64Reference) {
  const auto [trans_a, trans_b] = GetParam();
  uint64_t seed = 99;
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1},
                         {1, 129, 17},
                         {3, 1, 129},
                         {7, 17, 3},
                         {64, 1000, 17},
                         {129, 3, 1000},
                         {65, 66, 67}}) {
    for (float beta : {0.f, 1.f}) CheckSgemm(trans_a, trans_b, m, n, k, beta, seed++);
  }
}

INSTANTIATE_TEST_SUITE_P(AllTransposes, SgemmStridedTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<bool, bool>>& info) {
                           return absl::StrCat(std::get<0>(info.param) ? "At" : "A",
                                               std::get<1>(info.param) ? "Bt" : "B");
                         });

TEST(SgemmStridedTest, ZeroKScalesC) {
  Matrix c(2, 3, 3, DType::kF32);
  Generator gen(5);
  c.Fill(gen);
  std::vector<double> ref(6), scale(6, 1.0);
  for (int64_t i = 0; i < 6; ++i) ref[i] = -2.0 * c.at(i / 3, i % 3);
  const float a = 1.f, b = 1.f;
  SgemmStrided(false, true, 2, 3, 0, &a, 1, &b, 1, c.f32(), c.ld, -2.f);
  ExpectNear(c, ref, scale, 1e-7, "k=0 beta=-2");
}

}  // namespace
}  // namespace cctune::cpu
