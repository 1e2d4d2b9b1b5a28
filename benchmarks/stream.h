// STREAM-style memory-bandwidth kernels (copy, scale, add, triad, read) over OpenMP, and the
// machine's measured bandwidth peak that the other benchmarks report their figures against.
#ifndef CCTUNE_BENCHMARKS_STREAM_H_
#define CCTUNE_BENCHMARKS_STREAM_H_

#include <cstdint>

namespace cctune::bench {

// STREAM's four kernels plus a read-only sum, each over n doubles with a static OpenMP split
// (the same split that FillStreamArrays uses, so each thread touches pages it first-touched).
void StreamCopy(double* c, const double* a, int64_t n);                              // c = a
void StreamScale(double* b, const double* c, double s, int64_t n);                   // b = s·c
void StreamAdd(double* c, const double* a, const double* b, int64_t n);              // c = a + b
void StreamTriad(double* a, const double* b, const double* c, double s, int64_t n);  // a = b + s·c
double StreamRead(const double* a, int64_t n);                                       // sum(a)

// Bytes each kernel moves per element by STREAM's convention (write-allocate not counted).
constexpr double kCopyBytes = 16, kScaleBytes = 16, kAddBytes = 24, kTriadBytes = 24,
                 kReadBytes = 8;

// Fills x[i] = value in parallel (first touch by the threads that later stream it).
void FillStreamArray(double* x, double value, int64_t n);

// Best-of-several bandwidths in GB/s (1e9 bytes/s), measured once per process on arrays of
// 3 x 256 MiB (well beyond the last-level cache) and cached.
struct StreamPeak {
  double triad_gbs = 0;  // STREAM triad: the usual "measured bandwidth" figure
  double read_gbs = 0;   // read-only: the roofline of a weight-streaming GEMV
};
const StreamPeak& MeasuredStreamPeak();

}  // namespace cctune::bench

#endif  // CCTUNE_BENCHMARKS_STREAM_H_
