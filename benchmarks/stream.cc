#include "benchmarks/stream.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>

namespace cctune::bench {
namespace {

struct FreeDeleter {
  void operator()(double* p) const { std::free(p); }
};
using Array = std::unique_ptr<double[], FreeDeleter>;

Array AllocArray(int64_t n) {
  void* p = std::aligned_alloc(4096, ((n * sizeof(double) + 4095) / 4096) * 4096);
  if (p == nullptr) {
    std::fprintf(stderr, "stream: cannot allocate %lld doubles\n", static_cast<long long>(n));
    std::abort();
  }
  return Array(static_cast<double*>(p));
}

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

void StreamCopy(double* c, const double* a, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) c[i] = a[i];
}

void StreamScale(double* b, const double* c, double s, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) b[i] = s * c[i];
}

void StreamAdd(double* c, const double* a, const double* b, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
}

void StreamTriad(double* a, const double* b, const double* c, double s, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
}

double StreamRead(const double* a, int64_t n) {
  double sum = 0;
#pragma omp parallel for simd schedule(static) reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += a[i];
  return sum;
}

void FillStreamArray(double* x, double value, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) x[i] = value;
}

const StreamPeak& MeasuredStreamPeak() {
  static const StreamPeak peak = [] {
    const int64_t n = (256 << 20) / sizeof(double);
    Array a = AllocArray(n), b = AllocArray(n), c = AllocArray(n);
    FillStreamArray(a.get(), 1.0, n);
    FillStreamArray(b.get(), 2.0, n);
    FillStreamArray(c.get(), 0.5, n);
    StreamPeak p;
    volatile double sink = 0;
    for (int rep = 0; rep < 5; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      StreamTriad(a.get(), b.get(), c.get(), 3.0, n);
      p.triad_gbs = std::max(p.triad_gbs, kTriadBytes * n / Seconds(t0) * 1e-9);
      t0 = std::chrono::steady_clock::now();
      sink = sink + StreamRead(a.get(), n);
      p.read_gbs = std::max(p.read_gbs, kReadBytes * n / Seconds(t0) * 1e-9);
    }
    std::fprintf(stderr, "measured stream peak: triad %.1f GB/s, read %.1f GB/s (%d threads)\n",
                 p.triad_gbs, p.read_gbs, omp_get_max_threads());
    return p;
  }();
  return peak;
}

}  // namespace cctune::bench
