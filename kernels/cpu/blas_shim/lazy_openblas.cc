// The OpenBLAS entry points cctune calls, resolved in libopenblas on first use (lazy_openblas.h).
#include "kernels/cpu/blas_shim/lazy_openblas.h"

#include <cblas.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace cctune {
namespace {

using SgemmFn = void (*)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, blasint,
                         blasint, blasint, float, const float*, blasint, const float*, blasint,
                         float, float*, blasint);
using SgemvFn = void (*)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, blasint, blasint, float,
                         const float*, blasint, const float*, blasint, float, float*, blasint);
using SetThreadsFn = void (*)(int);

struct OpenBlasApi {
  SgemmFn sgemm = nullptr;
  SgemvFn sgemv = nullptr;
  SetThreadsFn set_num_threads = nullptr;
};

[[noreturn]] void Die(const char* what, const char* detail) {
  std::fprintf(stderr,
               "cctune: %s: %s (OpenBLAS is opened at its first use; install libopenblas0 "
               "(tools/setup.sh) or point %s at the library)\n",
               what, detail ? detail : "unknown error", kOpenBlasLibraryEnv);
  std::abort();
}

void* Symbol(void* handle, const char* path, const char* name) {
  void* sym = ::dlsym(handle, name);
  if (sym == nullptr) {
    const std::string what = std::string(path) + " has no symbol " + name;
    Die(what.c_str(), ::dlerror());
  }
  return sym;
}

OpenBlasApi Open() {
  const char* env = std::getenv(kOpenBlasLibraryEnv);
  const char* path = env != nullptr && *env != '\0' ? env : kOpenBlasLibrary;
  // cctune calls OpenBLAS on one thread per call (kernels/cpu/gemm splits the work over its own
  // threads and sets openblas_set_num_threads(1)). Without this, OpenBLAS's constructor starts
  // a server thread per core, which spin-yields for ~2^28 cycles (~80 ms) after the load,
  // taking time slices from the caller's threads: measured, sched_yield from libopenblas's
  // thread and ~6% of a 128-token prefill in the scheduler (lazy_openblas.h). A value the
  // user set stays.
  ::setenv("OPENBLAS_NUM_THREADS", "1", /*overwrite=*/0);
  // RTLD_LOCAL: the library's symbols do not join the global scope (ours stay the ones called).
  void* handle = ::dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const std::string what = std::string("cannot open ") + path;
    Die(what.c_str(), ::dlerror());
  }
  OpenBlasApi api;
  api.sgemm = reinterpret_cast<SgemmFn>(Symbol(handle, path, "cblas_sgemm"));
  api.sgemv = reinterpret_cast<SgemvFn>(Symbol(handle, path, "cblas_sgemv"));
  api.set_num_threads =
      reinterpret_cast<SetThreadsFn>(Symbol(handle, path, "openblas_set_num_threads"));
  return api;
}

const OpenBlasApi& Api() {
  static const OpenBlasApi api = Open();  // thread-safe once; later calls: one load and branch
  return api;
}

}  // namespace

void LoadOpenBlas() { Api(); }

}  // namespace cctune

// The cblas.h declarations, defined here (C linkage, the same signatures: the header is
// included above, so a mismatch does not compile).
extern "C" {

void cblas_sgemm(OPENBLAS_CONST enum CBLAS_ORDER order, OPENBLAS_CONST enum CBLAS_TRANSPOSE ta,
                 OPENBLAS_CONST enum CBLAS_TRANSPOSE tb, OPENBLAS_CONST blasint m,
                 OPENBLAS_CONST blasint n, OPENBLAS_CONST blasint k, OPENBLAS_CONST float alpha,
                 OPENBLAS_CONST float* a, OPENBLAS_CONST blasint lda, OPENBLAS_CONST float* b,
                 OPENBLAS_CONST blasint ldb, OPENBLAS_CONST float beta, float* c,
                 OPENBLAS_CONST blasint ldc) {
  cctune::Api().sgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void cblas_sgemv(OPENBLAS_CONST enum CBLAS_ORDER order, OPENBLAS_CONST enum CBLAS_TRANSPOSE trans,
                 OPENBLAS_CONST blasint m, OPENBLAS_CONST blasint n, OPENBLAS_CONST float alpha,
                 OPENBLAS_CONST float* a, OPENBLAS_CONST blasint lda, OPENBLAS_CONST float* x,
                 OPENBLAS_CONST blasint incx, OPENBLAS_CONST float beta, float* y,
                 OPENBLAS_CONST blasint incy) {
  cctune::Api().sgemv(order, trans, m, n, alpha, a, lda, x, incx, beta, y, incy);
}

void openblas_set_num_threads(int num_threads) { cctune::Api().set_num_threads(num_threads); }

}  // extern "C"
