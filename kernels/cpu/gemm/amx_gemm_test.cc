#include "kernels/cpu/gemm/amx_gemm.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "core/random.h"
#include "gtest/gtest.h"
#include "kernels/cpu/isa.h"

namespace cctune::cpu {
namespace {

constexpr double kU32 = 1.0 / (1 << 24);  // f32 unit roundoff

std::string NoAmxReason() {
  return std::string("AMX-BF16 not available (CPU has AMX: ") +
         (CpuHasAmxBf16() ? "yes" : "no") + ", active level " +
         IsaLevelName(ActiveIsaLevel()) + ", CCTUNE_CPU_ISA=" +
         (std::getenv("CCTUNE_CPU_ISA") ? std::getenv("CCTUNE_CPU_ISA") : "") + ")";
}

// rows x cols stored values with row stride ld (padding NaN, so reading past a row poisons the
// result); `value` holds what the kernel multiplies: the element rounded to bf16.
struct Matrix {
  int64_t rows, cols, ld;
  DType dtype;
  std::vector<float> f32;
  std::vector<bf16> b16;
  std::vector<double> value;
  const void* data() const {
    return dtype == DType::kF32 ? static_cast<const void*>(f32.data()) : b16.data();
  }
  double at(int64_t r, int64_t c) const { return value[r * cols + c]; }
};

Matrix MakeMatrix(int64_t rows, int64_t cols, int64_t pad, DType dtype, Generator& gen) {
  Matrix mat{rows, cols, cols + pad, dtype, {}, {}, {}};
  const size_t size = static_cast<size_t>(std::max<int64_t>(1, rows * mat.ld));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  if (dtype == DType::kF32) {
    mat.f32.assign(size, nan);
  } else {
    mat.b16.assign(size, FloatToBf16(nan));
  }
  mat.value.resize(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float x = static_cast<float>(gen.Normal());
      const bf16 h = FloatToBf16(x);
      if (dtype == DType::kF32) {
        mat.f32[r * mat.ld + c] = x;
      } else {
        mat.b16[r * mat.ld + c] = h;
      }
      mat.value[r * cols + c] = Bf16ToFloat(h);
    }
  }
  return mat;
}

struct Case {
  bool trans_a, trans_b;
  int64_t m, n, k;
  DType a_dtype, b_dtype;
  float beta;
  int64_t pad;  // extra elements per row of A, B and C
};

// Checks AmxGemm against an fp64 product of the bf16-rounded operands. Bound per element:
// k + 2 roundings of f32 partial sums, each <= 2^-24 of sum_k |a·b| + |beta·c|.
void Check(const Case& t, uint64_t seed) {
  SCOPED_TRACE(::testing::Message()
               << "trans_a=" << t.trans_a << " trans_b=" << t.trans_b << " m=" << t.m
               << " n=" << t.n << " k=" << t.k << " a=" << DTypeName(t.a_dtype)
               << " b=" << DTypeName(t.b_dtype) << " beta=" << t.beta << " pad=" << t.pad);
  Generator gen(seed);
  // op(A)[m, k]: stored [m, k] or, trans_a, [k, m]; op(B)[k, n]: [k, n] or, trans_b, [n, k].
  const Matrix a = t.trans_a ? MakeMatrix(t.k, t.m, t.pad, t.a_dtype, gen)
                             : MakeMatrix(t.m, t.k, t.pad, t.a_dtype, gen);
  const Matrix b = t.trans_b ? MakeMatrix(t.n, t.k, t.pad, t.b_dtype, gen)
                             : MakeMatrix(t.k, t.n, t.pad, t.b_dtype, gen);
  const int64_t ldc = t.n + t.pad;
  std::vector<float> c(static_cast<size_t>(std::max<int64_t>(1, t.m * ldc)));
  const float sentinel = 12345.f;
  for (int64_t i = 0; i < t.m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      c[i * ldc + j] = j >= t.n ? sentinel
                       : t.beta == 0.f ? std::numeric_limits<float>::quiet_NaN()
                                       : static_cast<float>(gen.Normal());
    }
  }
  const std::vector<float> c0 = c;
  AmxGemm(t.trans_a, t.trans_b, t.m, t.n, t.k, a.data(), t.a_dtype, a.ld, b.data(), t.b_dtype,
          b.ld, c.data(), ldc, t.beta);
  int bad = 0;
  for (int64_t i = 0; i < t.m && bad < 5; ++i) {
    for (int64_t j = 0; j < ldc && bad < 5; ++j) {
      const float got = c[i * ldc + j];
      if (j >= t.n) {
        if (got != sentinel) {
          ADD_FAILURE() << "wrote past row " << i << " at column " << j;
          ++bad;
        }
        continue;
      }
      double sum = 0, mag = 0;
      for (int64_t q = 0; q < t.k; ++q) {
        const double x = t.trans_a ? a.at(q, i) : a.at(i, q);
        const double y = t.trans_b ? b.at(j, q) : b.at(q, j);
        sum += x * y;
        mag += std::fabs(x * y);
      }
      if (t.beta != 0.f) {
        const double bc = static_cast<double>(t.beta) * c0[i * ldc + j];
        sum += bc;
        mag += std::fabs(bc);
      }
      const double tol = (t.k + 2) * kU32 * mag + 1e-30;
      if (!(std::fabs(got - sum) <= tol)) {
        ADD_FAILURE() << "C[" << i << "][" << j << "] = " << got << ", want " << sum
                      << " (tolerance " << tol << ")";
        ++bad;
      }
    }
  }
}

class AmxGemmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!AmxBf16Available()) GTEST_SKIP() << NoAmxReason();
  }
};

TEST_F(AmxGemmTest, RaggedShapesAllTransposesAndDtypes) {
  const int64_t shapes[][3] = {{1, 1, 1},     {15, 17, 33},   {17, 15, 1},  {33, 100, 17},
                               {100, 33, 257}, {257, 1, 100}, {1, 257, 15}, {32, 32, 32},
                               {64, 96, 512}, {48, 80, 1100}, {257, 257, 33}};
  const DType dtypes[][2] = {{DType::kF32, DType::kBF16},
                             {DType::kBF16, DType::kBF16},
                             {DType::kF32, DType::kF32},
                             {DType::kBF16, DType::kF32}};
  uint64_t seed = 1;
  for (const auto& s : shapes) {
    for (int tr = 0; tr < 4; ++tr) {
      for (const auto& d : dtypes) {
        const float beta = seed % 3 == 0 ? 0.f : seed % 3 == 1 ? 1.f : 0.5f;
        const int64_t pad = seed % 2 == 0 ? 0 : 3;
        Check({tr / 2 == 1, tr % 2 == 1, s[0], s[1], s[2], d[0], d[1], beta, pad}, seed);
        ++seed;
      }
    }
  }
}

// Large enough for every thread split (n in units, or m when n is narrow), k blocks (kc = 512)
// and m blocks (1024 rows).
TEST_F(AmxGemmTest, ThreadSplitsAndBlocks) {
  Check({false, true, 128, 700, 1030, DType::kF32, DType::kBF16, 0.f, 0}, 101);
  Check({false, true, 1100, 40, 300, DType::kF32, DType::kBF16, 1.f, 5}, 102);
  Check({false, false, 300, 64, 600, DType::kF32, DType::kF32, 0.f, 1}, 103);
  Check({true, false, 64, 300, 700, DType::kF32, DType::kF32, 1.f, 0}, 104);
}

TEST_F(AmxGemmTest, KZeroScalesC) {
  std::vector<float> c = {1.f, 2.f, 3.f, 4.f};
  AmxGemm(false, true, 2, 2, 0, nullptr, DType::kF32, 1, nullptr, DType::kBF16, 1, c.data(), 2,
          0.5f);
  EXPECT_EQ(c, (std::vector<float>{0.5f, 1.f, 1.5f, 2.f}));
  c.assign(4, std::numeric_limits<float>::quiet_NaN());
  AmxGemm(false, true, 2, 2, 0, nullptr, DType::kF32, 1, nullptr, DType::kBF16, 1, c.data(), 2,
          0.f);
  EXPECT_EQ(c, (std::vector<float>(4, 0.f)));
}

TEST(AmxAvailabilityTest, LevelsBelowAvx512Bf16TurnAmxOff) {
  if (!AmxBf16Available()) GTEST_SKIP() << NoAmxReason();
  {
    ScopedIsaLevel s(IsaLevel::kAvx512);
    EXPECT_FALSE(AmxBf16Available());
  }
  EXPECT_TRUE(AmxBf16Available());
}

TEST(AmxAvailabilityDeathTest, EnvironmentBelowAmxTurnsAmxOff) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  for (const char* level : {"avx512_bf16", "avx512", "avx2", "scalar"}) {
    EXPECT_EXIT(
        {
          setenv("CCTUNE_CPU_ISA", level, 1);
          std::exit(AmxBf16Available() ? 1 : 0);
        },
        ::testing::ExitedWithCode(0), "")
        << level;
  }
  // "amx" is the top: available exactly when the CPU has it.
  EXPECT_EXIT(
      {
        setenv("CCTUNE_CPU_ISA", "amx", 1);
        std::exit(AmxBf16Available() == CpuHasAmxBf16() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(AmxAvailabilityDeathTest, CallWithoutAmxAbortsWithTheReason) {
  if (!CpuHasAmxBf16()) GTEST_SKIP() << "no AMX on this CPU";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  float c = 0;
  const float x = 1.f;
  EXPECT_DEATH(
      {
        ScopedIsaLevel s(IsaLevel::kScalar);
        AmxGemm(false, true, 1, 1, 1, &x, DType::kF32, 1, &x, DType::kF32, 1, &c, 1, 0.f);
      },
      "AMX-BF16 is not available");
}

}  // namespace
}  // namespace cctune::cpu
