#include "kernels/cpu/attention_tiles.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/random.h"
#include "gtest/gtest.h"

namespace cctune {
namespace cpu {
namespace tiles {
namespace {

constexpr double kEps = std::numeric_limits<float>::epsilon();
constexpr float kGuard = 12345.f;

std::vector<float> RandomVector(Generator& gen, size_t n) {
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(gen.Normal());
  return v;
}

// Every row count through the full kernel and each tail, every column count through the
// 1-4 vector dispatch, against fp64 with the bound of an n-term f32 sum (n ulps of sum |a·b|);
// and each row alone gives the same bits as in its group (the sums do not depend on grouping).
TEST(AttentionTilesTest, RowsTimesColsMatchesFp64AndIsGroupingInvariant) {
  Generator gen(7);
  constexpr int64_t ldb = kMaxTileCols + 3, ldo = kMaxTileCols + 5;
  for (int64_t n : {1, 16, 64, 67}) {
    const int64_t lda = n + 2;
    for (int64_t rows = 1; rows <= 2 * kTileRowsPerKernel + 1; ++rows) {
      for (int64_t cols : {1, 15, 16, 17, 33, 48, 63, 64}) {
        const std::vector<float> a = RandomVector(gen, rows * lda);
        const std::vector<float> bt = RandomVector(gen, n * ldb);
        std::vector<float> out(rows * ldo, kGuard);
        RowsTimesCols(a.data(), rows, lda, bt.data(), ldb, n, cols, out.data(), ldo);
        const int64_t computed = (cols + kLanes - 1) / kLanes * kLanes;
        for (int64_t r = 0; r < rows; ++r) {
          std::vector<float> alone(ldo, kGuard);
          RowsTimesCols(a.data() + r * lda, 1, lda, bt.data(), ldb, n, cols, alone.data(), ldo);
          for (int64_t c = 0; c < ldo; ++c) {
            const float got = out[r * ldo + c];
            if (c >= computed) {
              ASSERT_EQ(got, kGuard) << "column " << c << " past the computed " << computed;
              continue;
            }
            double ref = 0, mag = 0;
            for (int64_t e = 0; e < n; ++e) {
              const double t = double{a[r * lda + e]} * bt[e * ldb + c];
              ref += t;
              mag += std::fabs(t);
            }
            ASSERT_LE(std::fabs(got - ref), n * kEps * mag + 1e-30)
                << "n " << n << " rows " << rows << " cols " << cols << " at " << r << "," << c;
            ASSERT_EQ(got, alone[c]) << "row " << r << " of " << rows << ", column " << c;
          }
        }
      }
    }
  }
}

TEST(AttentionTilesTest, WeightedRowSumsMatchFp64AndIsGroupingInvariant) {
  Generator gen(11);
  for (bool transposed : {false, true}) {
    for (int64_t nj : {0, 1, 7, 64}) {
      for (int64_t rows = 1; rows <= 2 * kTileRowsPerKernel + 1; ++rows) {
        for (int64_t chunks = 1; chunks <= 7; ++chunks) {
          const int64_t width = chunks * kLanes, ldx = width + 3, ldacc = width + 1;
          // W [rows, nj] stored row-major (wr = nj + 1) or transposed (wj = rows + 2).
          const int64_t wr = transposed ? 1 : nj + 1, wj = transposed ? rows + 2 : 1;
          const std::vector<float> w = RandomVector(gen, (rows + 2) * (nj + 1));
          const std::vector<float> x = RandomVector(gen, std::max<int64_t>(nj, 1) * ldx);
          const std::vector<float> acc0 = RandomVector(gen, rows * ldacc);
          std::vector<float> acc = acc0;
          WeightedRowSums(w.data(), wr, wj, nj, x.data(), ldx, acc.data(), ldacc, rows, chunks);
          for (int64_t r = 0; r < rows; ++r) {
            std::vector<float> alone(acc0.begin() + r * ldacc, acc0.begin() + (r + 1) * ldacc);
            WeightedRowSums(w.data() + r * wr, wr, wj, nj, x.data(), ldx, alone.data(), ldacc, 1,
                            chunks);
            for (int64_t c = 0; c < ldacc; ++c) {
              const float got = acc[r * ldacc + c];
              if (c >= width) {
                ASSERT_EQ(got, acc0[r * ldacc + c]) << "column " << c << " past the width";
                continue;
              }
              double ref = acc0[r * ldacc + c], mag = std::fabs(ref);
              for (int64_t j = 0; j < nj; ++j) {
                const double t = double{w[r * wr + j * wj]} * x[j * ldx + c];
                ref += t;
                mag += std::fabs(t);
              }
              ASSERT_LE(std::fabs(got - ref), (nj + 1) * kEps * mag + 1e-30)
                  << "nj " << nj << " rows " << rows << " chunks " << chunks << " at " << r
                  << "," << c;
              ASSERT_EQ(got, alone[c]) << "row " << r << " of " << rows << ", column " << c;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace tiles
}  // namespace cpu
}  // namespace cctune
