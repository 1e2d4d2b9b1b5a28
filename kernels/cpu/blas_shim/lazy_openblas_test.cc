// The lazy OpenBLAS shim: nothing of OpenBLAS is mapped until the first BLAS call, which then
// gives OpenBLAS's results (checked against an fp64 reference), and a library that cannot be
// opened ends the process with a message naming it.
#include "kernels/cpu/blas_shim/lazy_openblas.h"

#include <cblas.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace cctune {
namespace {

int ThreadsOfThisProcess() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::atoi(line.c_str() + 8);
  }
  return -1;
}

bool OpenBlasMapped() {
  std::ifstream maps("/proc/self/maps");
  std::stringstream ss;
  ss << maps.rdbuf();
  return ss.str().find("libopenblas") != std::string::npos;
}

std::vector<float> Random(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// |got - want| within a few f32 ulps of the sum of |terms| (k products, f32 accumulation).
void ExpectNear(double got, double want, double abs_sum, int k, const std::string& where) {
  const double tol = 4.0 * k * 6e-8 * abs_sum + 1e-30;
  EXPECT_LE(std::abs(got - want), tol) << where << ": got " << got << " want " << want;
}

// One test, in this order: the mappings are the process's, so "before" must come first.
TEST(LazyOpenBlasTest, OpensOnFirstCallAndComputes) {
  EXPECT_FALSE(OpenBlasMapped()) << "libopenblas is mapped before any BLAS call";

  std::mt19937 rng(7);
  const int m = 5, n = 7, k = 33, lda = k + 3, ldb = k + 1, ldc = n + 2;
  const std::vector<float> a = Random(size_t(m) * lda, rng);
  const std::vector<float> b = Random(size_t(n) * ldb, rng);
  std::vector<float> c = Random(size_t(m) * ldc, rng);
  const std::vector<float> c0 = c;
  const float alpha = 0.75f, beta = -0.5f;
  const int threads_before = ThreadsOfThisProcess();
  ASSERT_EQ(std::getenv("OPENBLAS_NUM_THREADS"), nullptr) << "the test runs with it unset";
  openblas_set_num_threads(1);  // the first call: opens the library
  EXPECT_TRUE(OpenBlasMapped());
  // OpenBLAS was opened single-threaded: no server threads spinning beside the caller's.
  EXPECT_EQ(ThreadsOfThisProcess(), threads_before);
  const char* threads_env = std::getenv("OPENBLAS_NUM_THREADS");
  EXPECT_STREQ(threads_env != nullptr ? threads_env : "(unset)", "1");
  // C = alpha A B^T + beta C (row-major, A m x k, B n x k): GemmNT, as kernels/cpu/gemm uses it.
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, alpha, a.data(), lda, b.data(),
              ldb, beta, c.data(), ldc);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double want = beta * double(c0[i * ldc + j]), abs_sum = std::abs(want);
      for (int p = 0; p < k; ++p) {
        const double t = alpha * double(a[i * lda + p]) * double(b[j * ldb + p]);
        want += t;
        abs_sum += std::abs(t);
      }
      ExpectNear(c[i * ldc + j], want, abs_sum, k, "sgemm");
    }
  }
  // Padding columns of C are left alone.
  for (int i = 0; i < m; ++i) {
    for (int j = n; j < ldc; ++j) EXPECT_EQ(c[i * ldc + j], c0[i * ldc + j]);
  }

  // y = alpha op(A) x + beta y, both transposes (A: rows x cols, leading dimension ld).
  const int rows = 9, cols = 17, ld = cols + 4;
  const std::vector<float> ma = Random(size_t(rows) * ld, rng);
  for (bool trans : {false, true}) {
    const int ylen = trans ? cols : rows, xlen = trans ? rows : cols;
    const std::vector<float> x = Random(xlen, rng);
    std::vector<float> y = Random(ylen, rng);
    const std::vector<float> y0 = y;
    cblas_sgemv(CblasRowMajor, trans ? CblasTrans : CblasNoTrans, rows, cols, alpha, ma.data(),
                ld, x.data(), 1, beta, y.data(), 1);
    for (int i = 0; i < ylen; ++i) {
      double want = beta * double(y0[i]), abs_sum = std::abs(want);
      for (int p = 0; p < xlen; ++p) {
        const double av = trans ? ma[p * ld + i] : ma[i * ld + p];
        const double t = alpha * av * double(x[p]);
        want += t;
        abs_sum += std::abs(t);
      }
      ExpectNear(y[i], want, abs_sum, xlen, trans ? "sgemv T" : "sgemv N");
    }
  }
}

TEST(LazyOpenBlasDeathTest, MissingLibraryIsNamed) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process: nothing opened yet
  EXPECT_DEATH(
      {
        ::setenv(kOpenBlasLibraryEnv, "/nonexistent/libopenblas.so.0", 1);
        LoadOpenBlas();
      },
      "cannot open /nonexistent/libopenblas.so.0.*CCTUNE_OPENBLAS_LIBRARY");
}

}  // namespace
}  // namespace cctune
