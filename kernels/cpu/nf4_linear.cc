#include "kernels/cpu/nf4_linear.h"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/gemm/gemm.h"

namespace cctune {
namespace cpu {

namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Splits `total` into panels of at most `cap` (>= 1), at least `parts` of them when possible,
// each a multiple of `align` except the last.
int64_t PanelSize(int64_t total, int64_t cap, int64_t parts, int64_t align) {
  int64_t p = std::min(std::max<int64_t>(cap, 1), CeilDiv(total, std::max<int64_t>(parts, 1)));
  if (p >= align) p = p / align * align;
  return std::max<int64_t>(p, 1);
}

// sum_c a[c] · b[c] in 16 lanes (vectorised at -O3), then the lanes and the tail.
float Dot(const float* a, const float* b, int64_t k) {
  float acc[16] = {};
  int64_t c = 0;
  for (; c + 16 <= k; c += 16) {
    for (int l = 0; l < 16; ++l) acc[l] += a[c + l] * b[c + l];
  }
  float s = 0;
  for (int l = 0; l < 16; ++l) s += acc[l];
  for (; c < k; ++c) s += a[c] * b[c];
  return s;
}

// Few rows of x (decode, small batches): a GEMV bound by the weight's bytes. Each weight row
// is dequantized into an L1-resident buffer and dotted with every row of x at once.
void SmallForward(int64_t m, int64_t n, int64_t k, const float* x, const Nf4View& w, float* y) {
#pragma omp parallel if (n * k >= (int64_t{1} << 16))
  {
    std::vector<float> row(static_cast<size_t>(k));
#pragma omp for schedule(static)
    for (int64_t j = 0; j < n; ++j) {
      DequantizeNf4Range(w, j * k, (j + 1) * k, row.data());
      for (int64_t i = 0; i < m; ++i) y[i * n + j] = Dot(x + i * k, row.data(), k);
    }
  }
}

}  // namespace

void Nf4LinearForward(int64_t m, int64_t n, int64_t k, const float* x, const Nf4View& w,
                      float* y) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    std::fill(y, y + m * n, 0.0f);
    return;
  }
  if (m <= kNf4SmallRows) return SmallForward(m, n, k, x, w, y);
  const int threads = omp_get_max_threads();
  const int64_t rows = PanelSize(n, kNf4PanelFloats / k, threads, 16);
  const int64_t panels = CeilDiv(n, rows);
#pragma omp parallel if (panels > 1)
  {
    std::vector<float> scratch(static_cast<size_t>(std::min(rows, n) * k));
#pragma omp for schedule(dynamic, 1)
    for (int64_t p = 0; p < panels; ++p) {
      const int64_t r0 = p * rows, r1 = std::min(n, r0 + rows);
      // Rows r0..r1 of W are elements [r0·k, r1·k): one contiguous range.
      DequantizeNf4Range(w, r0 * k, r1 * k, scratch.data());
      GemmNT(m, r1 - r0, k, x, k, scratch.data(), DType::kF32, k, y + r0, n, 0.0f);
    }
  }
}

void Nf4LinearBackwardDx(int64_t m, int64_t n, int64_t k, const float* dy, const Nf4View& w,
                         float* dx) {
  if (m == 0 || n == 0 || k == 0) return;
  const int threads = omp_get_max_threads();
  // Column panels of W, whole NF4 blocks where k allows; row blocks sized to the scratch.
  const int64_t cols = PanelSize(k, k, threads, kNf4BlockSize);
  const int64_t col_panels = CeilDiv(k, cols);
  const int64_t rows = std::max<int64_t>(1, std::min(n, kNf4PanelFloats / cols));
#pragma omp parallel if (col_panels > 1)
  {
    std::vector<float> scratch(static_cast<size_t>(rows * std::min(cols, k)));
#pragma omp for schedule(dynamic, 1)
    for (int64_t p = 0; p < col_panels; ++p) {
      const int64_t c0 = p * cols, c1 = std::min(k, c0 + cols), width = c1 - c0;
      for (int64_t r0 = 0; r0 < n; r0 += rows) {
        const int64_t r1 = std::min(n, r0 + rows);
        for (int64_t r = r0; r < r1; ++r) {
          DequantizeNf4Range(w, r * k + c0, r * k + c1, scratch.data() + (r - r0) * width);
        }
        // dx[:, c0:c1] += dy[:, r0:r1] · W[r0:r1, c0:c1].
        SgemmStrided(false, false, m, width, r1 - r0, dy + r0, n, scratch.data(), width,
                     dx + c0, k, 1.0f);
      }
    }
  }
}

}  // namespace cpu
}  // namespace cctune
