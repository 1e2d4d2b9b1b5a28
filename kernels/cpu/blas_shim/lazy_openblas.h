#ifndef CCTUNE_KERNELS_CPU_BLAS_SHIM_LAZY_OPENBLAS_H_
#define CCTUNE_KERNELS_CPU_BLAS_SHIM_LAZY_OPENBLAS_H_

// OpenBLAS, opened on first use. This library defines the cblas.h functions cctune calls
// (cblas_sgemm, cblas_sgemv, openblas_set_num_threads) with the header's signatures; the first
// call dlopen()s libopenblas and forwards every call to its symbols. A binary linked with this
// target instead of -lopenblas does not load OpenBLAS (nor libgfortran, libquadmath) at start,
// and OpenBLAS's constructor (which starts its thread pool) runs only when a GEMM needs it:
// `generate --help` and a bf16 decode never pay for it. Callers include <cblas.h> as before.
//
// The library opened: $CCTUNE_OPENBLAS_LIBRARY when set, otherwise libopenblas.so.0 from the
// loader's search path (Debian's libopenblas0-pthread). A library that cannot be opened or
// lacks a symbol ends the process with a message that names it (a BLAS call cannot fail).
// Don't link a binary with both this and -lopenblas: both define the cblas_* symbols.
// Before opening it, OPENBLAS_NUM_THREADS is set to 1 where the environment does not set it:
// cctune runs every BLAS call on one thread, and OpenBLAS's idle server threads would otherwise
// spin-yield beside the caller's threads for ~80 ms after the load.

namespace cctune {

inline constexpr char kOpenBlasLibrary[] = "libopenblas.so.0";
inline constexpr char kOpenBlasLibraryEnv[] = "CCTUNE_OPENBLAS_LIBRARY";

// Opens OpenBLAS now (what the first BLAS call would do); idempotent, thread-safe.
void LoadOpenBlas();

}  // namespace cctune

#endif  // CCTUNE_KERNELS_CPU_BLAS_SHIM_LAZY_OPENBLAS_H_
