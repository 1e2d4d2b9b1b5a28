#include "kernels/cpu/gemm/packed_gemm.h"

#include <omp.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/random.h"
#include "gtest/gtest.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/isa_test_util.h"
#include "tests/util/float_near.h"

namespace cctune::cpu {
namespace {

constexpr double kEps32 = 1.0 / (1 << 23);

// The packed path of an ISA level.
PackedIsa PathOf(IsaLevel level) {
  switch (level) {
    case IsaLevel::kAvx2:
      return PackedIsa::kAvx2;
    case IsaLevel::kAvx512:
      return PackedIsa::kAvx512;
    case IsaLevel::kAvx512Bf16:
      return PackedIsa::kAvx512Bf16;
    default:
      return PackedIsa::kScalar;
  }
}

// rows x cols values of `dtype` with row stride ld; the padding holds NaN so that a kernel
// reading past a row poisons its result. `stored` keeps the (rounded) values as doubles.
struct Operand {
  int64_t rows, cols, ld;
  DType dtype;
  std::vector<uint8_t> buf;
  std::vector<double> stored;

  Operand(int64_t r, int64_t c, int64_t ld_, DType t, Generator* gen, bool fill = true)
      : rows(r), cols(c), ld(ld_), dtype(t), stored(r * c, 0.0) {
    buf.resize(static_cast<size_t>(std::max<int64_t>(1, r * ld)) * DTypeSize(t));
    for (int64_t i = 0; i < r * ld; ++i) {
      StoreFromDouble(buf.data(), t, i, std::numeric_limits<double>::quiet_NaN());
    }
    if (!fill) return;
    for (int64_t i = 0; i < r; ++i) {
      for (int64_t j = 0; j < c; ++j) {
        StoreFromDouble(buf.data(), t, i * ld + j, 2.0 * gen->Uniform() - 1.0);
        stored[i * c + j] = LoadAsDouble(buf.data(), t, i * ld + j);
      }
    }
  }
  double Get(int64_t i, int64_t j) const { return LoadAsDouble(buf.data(), dtype, i * ld + j); }
  float* f32() { return reinterpret_cast<float*>(buf.data()); }
};

// Checks every element of C [m, n] (row stride c.ld) against want(i, j) = {fp64 value, scale}
// within tol·scale, and that C's padding columns stayed NaN (never written).
template <typename Want>
void ExpectMatches(const Operand& c, int64_t m, int64_t n, double tol, const std::string& what,
                   Want want) {
  int failures = 0;
  for (int64_t i = 0; i < m && failures < 5; ++i) {
    for (int64_t j = 0; j < c.ld && failures < 5; ++j) {
      const double got = c.Get(i, j);
      if (j >= n) {
        if (!std::isnan(got)) {
          ADD_FAILURE() << what << ": padding C[" << i << "," << j << "] written";
          ++failures;
        }
        continue;
      }
      const auto [value, scale] = want(i, j);
      const auto near = testing::FloatNear(got, value, 0, 0, tol * scale + 1e-30);
      if (!near) {
        ADD_FAILURE() << what << ": C[" << i << "," << j << "] " << near.message();
        ++failures;
      }
    }
  }
}

// Runs PackedGemmNT(isa) on one case and checks C against the fp64 result within
// tol·(sum_k |a·b| + |beta·c|) (ExpectMatches).
// nn: PackedGemmNN instead, B stored [k, n] (the dX = dY·W shape).
void CheckCase(PackedIsa isa, DType dtype, int64_t m, int64_t n, int64_t k, int64_t pad,
               float beta, uint64_t seed, bool nn = false) {
  Generator gen(seed);
  Operand a(m, k, k + pad, DType::kF32, &gen);
  Operand b = nn ? Operand(k, n, n + pad + 1, dtype, &gen)
                 : Operand(n, k, k + pad + (pad & 1), dtype, &gen);
  Operand c(m, n, n + pad, DType::kF32, &gen, /*fill=*/beta != 0.f);
  const std::vector<double> c0 = c.stored;
  if (nn) {
    PackedGemmNN(isa, m, n, k, a.f32(), a.ld, b.buf.data(), dtype, b.ld, c.f32(), c.ld, beta);
  } else {
    PackedGemmNT(isa, m, n, k, a.f32(), a.ld, b.buf.data(), dtype, b.ld, c.f32(), c.ld, beta);
  }
  // The bf16 dot path rounds A to bf16 (2^-9 relative per element).
  const double tol = kEps32 * (k / 4.0 + 8.0) + (isa == PackedIsa::kAvx512Bf16 ? 1.0 / 256 : 0);
  const std::string what = absl::StrCat(nn ? "NN " : "", PackedIsaName(isa), " ", DTypeName(dtype),
                                        " m=", m, " n=", n, " k=", k, " pad=", pad, " beta=", beta);
  ExpectMatches(c, m, n, tol, what, [&](int64_t i, int64_t j) {
    double want = beta != 0.f ? beta * c0[i * n + j] : 0.0, scale = std::fabs(want);
    for (int64_t q = 0; q < k; ++q) {
      const double prod = a.stored[i * k + q] * (nn ? b.stored[q * n + j] : b.stored[j * k + q]);
      want += prod;
      scale += std::fabs(prod);
    }
    return std::pair<double, double>{want, scale};
  });
}

class PackedGemmTest : public testing::IsaLevelTest {};

// Odd sizes around the tile and block edges (k odd: half a bf16 pair), strides, beta 0/1/0.5.
TEST_P(PackedGemmTest, MatchesFp64Reference) {
  const PackedIsa isa = PathOf(GetParam());
  ASSERT_TRUE(PackedIsaSupported(isa));
  const PackedBlocking bl = PackedGemmBlocking(isa);
  uint64_t seed = 1;
  int cases = 0;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    if (isa == PackedIsa::kAvx512Bf16 && dtype != DType::kBF16) continue;
    // m's last strip: every row count the AVX-512 kernels' 4-, 8- and 12-row forms take, and
    // their boundaries (4, 8 rows).
    for (int64_t m : {int64_t{1}, int64_t{bl.mr - 1}, int64_t{bl.mr}, int64_t{2 * bl.mr + 5},
                      int64_t{bl.mr + 4}, int64_t{2 * bl.mr + 8}}) {
      for (int64_t n : {int64_t{1}, int64_t{bl.nr + 1}, int64_t{3 * bl.nr - 1}}) {
        for (int64_t k : {int64_t{1}, int64_t{2}, int64_t{17}, bl.kc, bl.kc + 1, 2 * bl.kc + 7}) {
          for (auto [beta, pad] : {std::pair<float, int64_t>{0.f, 3}, {1.f, 0}, {0.5f, 5}}) {
            CheckCase(isa, dtype, std::max<int64_t>(1, m), n, k, pad, beta, seed++);
            if (HasFailure()) return;
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_GT(cases, 150);
}

// Several m blocks (m > mc) and n blocks (n > nc), and a shape that splits m across threads
// (n narrower than two micro-panels per thread).
TEST_P(PackedGemmTest, CrossesCacheBlocks) {
  const PackedIsa isa = PathOf(GetParam());
  const PackedBlocking bl = PackedGemmBlocking(isa);
  const DType dtype = isa == PackedIsa::kAvx512Bf16 ? DType::kBF16 : DType::kF16;
  CheckCase(isa, dtype, bl.mc + bl.mr + 3, 2 * bl.nr + 3, 45, 1, 1.f, 11);
  CheckCase(isa, dtype, 7, bl.nc + bl.nr + 5, 33, 2, 0.f, 12);
  CheckCase(isa, DType::kBF16, 300, 5, 2 * bl.kc + 1, 0, 1.f, 13);
}

// PackedGemmNT on the avx512_bf16 path reads B's rows as stored (32-row strips of A times
// 12-row groups of B, each group's k-block copied to a buffer with rows 64 bytes further
// apart, k-blocks of 2048, m-blocks of 128 rows): sizes around those edges, odd k (the last
// value of each B row read alone), B rows past n never read (NaN padding), and the split of m
// across threads when n is narrow.
TEST_P(PackedGemmTest, Bf16InPlaceBAcrossItsBlocks) {
  const PackedIsa isa = PathOf(GetParam());
  if (isa != PackedIsa::kAvx512Bf16) GTEST_SKIP() << "the avx512_bf16 path only";
  uint64_t seed = 100;
  // (It takes k >= 1024, or B of 4 MiB: the shapes below; smaller ones take the pair panels.)
  for (int64_t m : {1, 16, 17, 31, 33, 129}) {  // strips of one or two 16-row halves
    for (int64_t n : {1, 5, 12, 13, 25}) {
      for (int64_t k : {1025, 2048, 2049}) CheckCase(isa, DType::kBF16, m, n, k, 3, 0.5f, seed++);
    }
  }
  CheckCase(isa, DType::kBF16, 70, 30, 4097, 0, 0.f, seed++);
  CheckCase(isa, DType::kBF16, 260, 4, 1100, 1, 1.f, seed++);  // m split across threads
  CheckCase(isa, DType::kBF16, 64, 200, 1024, 2, 0.f, seed++);  // n split across threads
  CheckCase(isa, DType::kBF16, 40, 8200, 257, 1, 0.f, seed++);  // k < 1024, B >= 4 MiB
}

// The in-place route's groups of B are claimed one by one (each thread its share, then the
// others' from their ends): with 1 to 5 threads (more than the cores, so that threads fall
// behind and their groups are taken) every C element is bit-identical to one thread's, so each
// group ran exactly once (a group run twice adds its later k-blocks twice; one not run leaves
// C's initial values). Shapes: two blocks of 128 rows x 3 k-blocks; fewer groups than threads.
TEST_P(PackedGemmTest, Bf16InPlaceGroupsRunOnceOnAnyThreadCount) {
  const PackedIsa isa = PathOf(GetParam());
  if (isa != PackedIsa::kAvx512Bf16) GTEST_SKIP() << "the avx512_bf16 path only";
  const int saved = omp_get_max_threads();
  uint64_t seed = 300;
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{129, 300, 4100}, {64, 25, 8192},
                         {200, 1000, 2048}}) {
    Generator gen(seed++);
    Operand a(m, k, k, DType::kF32, &gen), b(n, k, k, DType::kBF16, &gen);
    const Operand c0(m, n, n, DType::kF32, &gen);
    std::vector<float> want;
    for (int threads : {1, 2, 3, 5}) {
      omp_set_num_threads(threads);
      for (int rep = 0; rep < 3; ++rep) {
        Operand c = c0;
        PackedGemmNT(isa, m, n, k, a.f32(), a.ld, b.buf.data(), DType::kBF16, b.ld, c.f32(),
                     c.ld, 1.f);
        const float* got = c.f32();
        if (want.empty()) {
          want.assign(got, got + m * n);
          continue;
        }
        int64_t differ = 0;
        for (int64_t i = 0; i < m * n; ++i) differ += got[i] != want[i];
        EXPECT_EQ(differ, 0) << "m=" << m << " n=" << n << " k=" << k << " threads=" << threads;
      }
    }
  }
  omp_set_num_threads(saved);
  // And against fp64 with several threads (CheckCase's bound).
  CheckCase(isa, DType::kBF16, 129, 300, 4100, 0, 1.f, seed++);
}

TEST_P(PackedGemmTest, ZeroKScalesC) {
  const PackedIsa isa = PathOf(GetParam());
  Generator gen(5);
  Operand c(3, 4, 4, DType::kF32, &gen);
  const float a = 1.f;
  const bf16 b{};
  PackedGemmNT(isa, 3, 4, 0, &a, 0, &b, DType::kBF16, 0, c.f32(), c.ld, -2.f);
  for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(c.f32()[i], static_cast<float>(-2.0 * c.stored[i]));
}

// PackedSgemm (f32, the training GEMMs' transposed operands): every (trans_a, trans_b), sizes
// around the tile and k-block edges, NaN-padded strides, beta 0 / 1 / 0.5, against fp64
// within the same k·eps32 bound as the NT path.
void CheckSgemmCase(PackedIsa isa, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                    int64_t pad, float beta, uint64_t seed) {
  Generator gen(seed);
  // Stored shapes: A [m, k] or [k, m]; B [k, n] or [n, k].
  Operand a(trans_a ? k : m, trans_a ? m : k, (trans_a ? m : k) + pad, DType::kF32, &gen);
  Operand b(trans_b ? n : k, trans_b ? k : n, (trans_b ? k : n) + pad + 1, DType::kF32, &gen);
  Operand c(m, n, n + pad, DType::kF32, &gen, /*fill=*/beta != 0.f);
  const std::vector<double> c0 = c.stored;
  PackedSgemm(isa, trans_a, trans_b, m, n, k, a.f32(), a.ld, b.f32(), b.ld, c.f32(), c.ld, beta);
  // The bf16 dot path rounds both operands: (1 + 2^-8)^2 - 1 < 2^-7 + 2^-16.
  const double tol =
      kEps32 * (k / 4.0 + 8.0) + (isa == PackedIsa::kAvx512Bf16 ? 1.0 / 128 + 1.0 / 65536 : 0);
  const std::string what = absl::StrCat(PackedIsaName(isa), " trans_a=", trans_a, " trans_b=",
                                        trans_b, " m=", m, " n=", n, " k=", k, " pad=", pad,
                                        " beta=", beta);
  ExpectMatches(c, m, n, tol, what, [&](int64_t i, int64_t j) {
    double want = beta != 0.f ? beta * c0[i * n + j] : 0.0, scale = std::fabs(want);
    for (int64_t q = 0; q < k; ++q) {
      const double av = trans_a ? a.stored[q * m + i] : a.stored[i * k + q];
      const double bv = trans_b ? b.stored[j * k + q] : b.stored[q * n + j];
      want += av * bv;
      scale += std::fabs(av * bv);
    }
    return std::pair<double, double>{want, scale};
  });
}

// The f32 path of a level (PackedSgemm has no bf16 dot path).
PackedIsa F32PathOf(IsaLevel level) {
  const PackedIsa isa = PathOf(level);
  return isa == PackedIsa::kAvx512Bf16 ? PackedIsa::kAvx512 : isa;
}

TEST_P(PackedGemmTest, SgemmTransposedOperandsMatchFp64) {
  const PackedIsa isa = F32PathOf(GetParam());
  ASSERT_TRUE(PackedIsaSupported(isa));
  const PackedBlocking bl = PackedGemmBlocking(isa);
  uint64_t seed = 100;
  int cases = 0;
  for (bool trans_a : {false, true}) {
    for (bool trans_b : {false, true}) {
      for (int64_t m : {int64_t{1}, int64_t{bl.mr + 1}, int64_t{2 * bl.mr + 5}}) {
        for (int64_t n : {int64_t{1}, int64_t{bl.nr - 1}, int64_t{2 * bl.nr + 3}}) {
          for (int64_t k : {int64_t{1}, int64_t{17}, bl.kc + 3}) {
            for (auto [beta, pad] : {std::pair<float, int64_t>{0.f, 3}, {1.f, 0}, {0.5f, 2}}) {
              CheckSgemmCase(isa, trans_a, trans_b, m, n, k, pad, beta, seed++);
              if (HasFailure()) return;
              ++cases;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 4 * 3 * 3 * 3 * 3);
}

// The bf16 dot path of PackedSgemm (dY·W, dYᵀ·X of bf16 training: trans_b false), at
// avx512_bf16 only: both operands rounded to bf16.
TEST_P(PackedGemmTest, SgemmBf16DotMatchesFp64) {
  if (PathOf(GetParam()) != PackedIsa::kAvx512Bf16) GTEST_SKIP() << "needs avx512_bf16";
  const PackedIsa isa = PackedIsa::kAvx512Bf16;
  const PackedBlocking bl = PackedGemmBlocking(isa);
  uint64_t seed = 400;
  for (bool trans_a : {false, true}) {
    for (int64_t m : {int64_t{1}, int64_t{bl.mr + 1}, int64_t{2 * bl.mr + 5}}) {
      for (int64_t n : {int64_t{1}, int64_t{bl.nr - 1}, int64_t{2 * bl.nr + 3}}) {
        for (int64_t k : {int64_t{1}, int64_t{2}, int64_t{17}, bl.kc + 3}) {
          for (auto [beta, pad] : {std::pair<float, int64_t>{0.f, 3}, {1.f, 0}, {0.5f, 2}}) {
            CheckSgemmCase(isa, trans_a, false, m, n, k, pad, beta, seed++);
            if (HasFailure()) return;
          }
        }
      }
    }
  }
  CheckSgemmCase(isa, true, false, bl.mc + bl.mr + 3, 2 * bl.nr + 3, 2 * bl.kc + 5, 1, 1.f, 41);
  CheckSgemmCase(isa, false, false, 9, bl.nc + bl.nr + 5, 40, 0, 0.f, 42);
}

// A training-sized dW (dYᵀ·X, several m blocks and k blocks) and dX (dY·W, n blocks).
TEST_P(PackedGemmTest, SgemmCrossesCacheBlocks) {
  const PackedIsa isa = F32PathOf(GetParam());
  const PackedBlocking bl = PackedGemmBlocking(isa);
  CheckSgemmCase(isa, true, false, bl.mc + bl.mr + 3, 2 * bl.nr + 3, 2 * bl.kc + 5, 1, 1.f, 21);
  CheckSgemmCase(isa, false, false, 9, bl.nc + bl.nr + 5, 40, 0, 0.f, 22);
}

// PackedGemmNN (dX = dY·W for weights as stored: B [k, n] row-major): bf16 B on the bf16 dot
// path (A rounded to bf16, as PackedGemmNT's) at avx512_bf16, f32 B on the level's f32 path;
// sizes around the tile, pair and block edges, odd k (a half pair), NaN-padded strides.
TEST_P(PackedGemmTest, GemmNNMatchesFp64) {
  const PackedIsa isa = PathOf(GetParam());
  const DType dtype = isa == PackedIsa::kAvx512Bf16 ? DType::kBF16 : DType::kF32;
  const PackedBlocking bl = PackedGemmBlocking(isa);
  uint64_t seed = 300;
  int cases = 0;
  for (int64_t m : {int64_t{1}, int64_t{bl.mr + 1}, int64_t{2 * bl.mr + 5}}) {
    for (int64_t n : {int64_t{1}, int64_t{bl.nr - 1}, int64_t{2 * bl.nr + 3}}) {
      for (int64_t k : {int64_t{1}, int64_t{2}, int64_t{17}, bl.kc + 3}) {
        for (auto [beta, pad] : {std::pair<float, int64_t>{0.f, 3}, {1.f, 0}, {0.5f, 2}}) {
          CheckCase(isa, dtype, m, n, k, pad, beta, seed++, /*nn=*/true);
          if (HasFailure()) return;
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 3 * 3 * 4 * 3);
  // Several m, n and k blocks, and a shape that splits m across threads.
  CheckCase(isa, dtype, bl.mc + bl.mr + 3, bl.nc + bl.nr + 5, 2 * bl.kc + 1, 1, 1.f, 31, true);
  CheckCase(isa, dtype, 300, 5, 45, 0, 0.f, 32, true);
}

TEST(PackedGemmNNTest, RejectsBf16OnAnF32Path) {
  const float a = 1.f;
  const bf16 b{};
  float c = 0.f;
  EXPECT_DEATH(PackedGemmNN(PackedIsa::kScalar, 1, 1, 1, &a, 1, &b, DType::kBF16, 1, &c, 1, 0.f),
               "bf16 B takes the avx512_bf16 path");
}

TEST(PackedSgemmTest, ZeroKScalesC) {
  Generator gen(6);
  Operand c(2, 3, 3, DType::kF32, &gen);
  const float x = 1.f;
  PackedSgemm(PackedIsa::kScalar, true, false, 2, 3, 0, &x, 2, &x, 3, c.f32(), c.ld, 0.5f);
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(c.f32()[i], static_cast<float>(0.5 * c.stored[i]));
}

CCTUNE_INSTANTIATE_ISA_LEVELS(PackedGemmTest);

TEST(PackedGemmBlockingTest, BlocksAreWholeTilesAndSteps) {
  for (PackedIsa isa :
       {PackedIsa::kScalar, PackedIsa::kAvx2, PackedIsa::kAvx512, PackedIsa::kAvx512Bf16}) {
    const PackedBlocking bl = PackedGemmBlocking(isa);
    EXPECT_EQ(bl.mc % bl.mr, 0) << PackedIsaName(isa);
    EXPECT_EQ(bl.nc % bl.nr, 0) << PackedIsaName(isa);
    EXPECT_EQ(bl.kc % 2, 0) << PackedIsaName(isa);
  }
  EXPECT_NE(BestPackedIsa(), PackedIsa::kAvx512Bf16);
  EXPECT_TRUE(PackedIsaSupported(BestPackedIsa()));
}

}  // namespace
}  // namespace cctune::cpu
