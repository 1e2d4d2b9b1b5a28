// The CPU emulator's runtime: fiber scheduling of thread blocks (emu.h), and stand-ins for the
// CUDA runtime and cuBLAS calls of the cuda backend. Device memory is host memory, so the
// whole backend and its tests run here, under AddressSanitizer if wanted (run_emu.sh --asan).
#include "emu.h"

#include <ucontext.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "cublas_api.h"

namespace emu {
namespace {

constexpr size_t kFiberStack = 256 * 1024;
constexpr unsigned kMaxGridYZ = 65535;
constexpr size_t kMaxDynamicShared = 48 * 1024;

struct Fiber {
  ucontext_t ctx;
  dim3 tid;
  bool done = false;
  bool waiting = false;  // yielded at a barrier that has not released yet
};

struct Block {
  dim3 bid, bdim, gdim;
  int nthreads = 0;
  std::vector<Fiber> fibers;
  int current = 0;
  ucontext_t scheduler;
  // __syncthreads
  int bar_count = 0;
  long bar_gen = 0;
  // per-warp barrier and shuffle slots
  std::vector<int> warp_count;
  std::vector<long> warp_gen;
  std::vector<uint64_t> warp_slot;
  std::vector<char> smem;
  void (*fn)(void*) = nullptr;
  void* fn_ctx = nullptr;
  long progress = 0;  // barrier releases and finished threads
};

Block* g_block = nullptr;
cudaError_t g_last_error = cudaSuccess;

void Yield(bool waiting) {
  Fiber& f = g_block->fibers[g_block->current];
  f.waiting = waiting;
  swapcontext(&f.ctx, &g_block->scheduler);
}

void FiberMain() {
  g_block->fn(g_block->fn_ctx);
  Fiber& f = g_block->fibers[g_block->current];
  f.done = true;
  ++g_block->progress;
  swapcontext(&f.ctx, &g_block->scheduler);
}

void WarpBarrier() {
  Block& b = *g_block;
  const int w = static_cast<int>(ThreadIdx().x) / 32;
  const int warp_size = std::min(32, b.nthreads - w * 32);
  const long gen = b.warp_gen[w];
  if (++b.warp_count[w] == warp_size) {
    b.warp_count[w] = 0;
    ++b.warp_gen[w];
    ++b.progress;
    return;
  }
  while (b.warp_gen[w] == gen) Yield(true);
}

// Runs every thread of `b` to completion, aborting when all live threads wait on barriers
// that can no longer release.
void RunBlock(Block& b) {
  int live = b.nthreads;
  while (live > 0) {
    const long before = b.progress;
    bool all_waiting = true;
    for (int t = 0; t < b.nthreads; ++t) {
      Fiber& f = b.fibers[t];
      if (f.done) continue;
      b.current = t;
      swapcontext(&b.scheduler, &f.ctx);
      if (f.done) {
        --live;
        all_waiting = false;
      } else if (!f.waiting) {
        all_waiting = false;
      }
    }
    if (live > 0 && all_waiting && b.progress == before) {
      std::fprintf(stderr,
                   "emu: deadlock in block (%u, %u, %u): divergent __syncthreads or a "
                   "shuffle without its whole warp\n",
                   b.bid.x, b.bid.y, b.bid.z);
      std::abort();
    }
  }
}

}  // namespace

dim3 ThreadIdx() { return g_block->fibers[g_block->current].tid; }
dim3 BlockIdx() { return g_block->bid; }
dim3 BlockDim() { return g_block->bdim; }
dim3 GridDim() { return g_block->gdim; }
void* DynamicSharedRaw() { return g_block->smem.data(); }

void SyncThreads() {
  Block& b = *g_block;
  const long gen = b.bar_gen;
  if (++b.bar_count == b.nthreads) {
    b.bar_count = 0;
    ++b.bar_gen;
    ++b.progress;
    return;
  }
  while (b.bar_gen == gen) Yield(true);
}

uint64_t WarpExchange(uint64_t v, int src_lane) {
  Block& b = *g_block;
  const int t = static_cast<int>(ThreadIdx().x);
  const int w = t / 32;
  b.warp_slot[w * 32 + (t & 31)] = v;
  WarpBarrier();
  const uint64_t r = b.warp_slot[w * 32 + (src_lane & 31)];
  WarpBarrier();  // nobody overwrites a slot before every lane has read
  return r;
}

void RunGrid(const LaunchConfig& cfg, void (*fn)(void*), void* ctx) {
  const dim3 g = cfg.grid, bd = cfg.block;
  const long nthreads = static_cast<long>(bd.x) * bd.y * bd.z;
  if (nthreads < 1 || nthreads > 1024 || bd.y != 1 || bd.z != 1 || g.x < 1 || g.y < 1 || g.z < 1 ||
      g.y > kMaxGridYZ || g.z > kMaxGridYZ || g.x > 2147483647u || cfg.smem > kMaxDynamicShared) {
    std::fprintf(stderr, "emu: invalid launch: grid (%u, %u, %u) block (%u, %u, %u) smem %zu\n",
                 g.x, g.y, g.z, bd.x, bd.y, bd.z, cfg.smem);
    g_last_error = cudaErrorInvalidConfiguration;
    return;
  }
  static std::vector<char*> stacks;  // reused across launches, one per thread index
  while (stacks.size() < static_cast<size_t>(nthreads)) stacks.push_back(new char[kFiberStack]);
  for (unsigned bz = 0; bz < g.z; ++bz) {
    for (unsigned by = 0; by < g.y; ++by) {
      for (unsigned bx = 0; bx < g.x; ++bx) {
        Block b;
        b.bid = dim3(bx, by, bz);
        b.bdim = bd;
        b.gdim = g;
        b.nthreads = static_cast<int>(nthreads);
        b.fibers.resize(nthreads);
        const int nwarps = (b.nthreads + 31) / 32;
        b.warp_count.assign(nwarps, 0);
        b.warp_gen.assign(nwarps, 0);
        b.warp_slot.assign(nwarps * 32, 0);
        b.smem.assign(cfg.smem, static_cast<char>(0xff));  // NaN-filled floats
        b.fn = fn;
        b.fn_ctx = ctx;
        g_block = &b;
        for (int t = 0; t < b.nthreads; ++t) {
          Fiber& f = b.fibers[t];
          f.tid = dim3(t);
          getcontext(&f.ctx);
          f.ctx.uc_stack.ss_sp = stacks[t];
          f.ctx.uc_stack.ss_size = kFiberStack;
          f.ctx.uc_link = nullptr;
          makecontext(&f.ctx, FiberMain, 0);
        }
        RunBlock(b);
        g_block = nullptr;
      }
    }
  }
}

}  // namespace emu

// ---- CUDA runtime stand-ins ----

namespace {

std::mutex g_mu;
std::map<const char*, size_t, std::less<>> g_allocs;  // live device allocations
int g_device = 0;

cudaError_t Fail(cudaError_t e) {
  emu::g_last_error = e;
  return e;
}

// Aborts unless [p, p + n) lies inside one live device allocation.
void CheckDevice(const void* p, size_t n, const char* what) {
  std::lock_guard<std::mutex> lock(g_mu);
  const char* c = static_cast<const char*>(p);
  auto it = g_allocs.upper_bound(c);
  if (it != g_allocs.begin()) {
    --it;
    if (c + n <= it->first + it->second) return;
  }
  std::fprintf(stderr, "emu: %s: %zu bytes at %p are outside every device allocation\n", what, n,
               p);
  std::abort();
}

}  // namespace

cudaError_t cudaGetLastError() {
  const cudaError_t e = emu::g_last_error;
  emu::g_last_error = cudaSuccess;
  return e;
}

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "no error";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    default:
      return "emulated error";
  }
}

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    default:
      return "cudaErrorEmulated";
  }
}

cudaError_t cudaMalloc(void** p, size_t n) {
  if (n > (size_t{1} << 40)) {
    *p = nullptr;
    return Fail(cudaErrorMemoryAllocation);
  }
  *p = std::aligned_alloc(256, (std::max<size_t>(n, 1) + 255) / 256 * 256);
  std::memset(*p, 0xcd, n);  // garbage, as fresh device memory is
  std::lock_guard<std::mutex> lock(g_mu);
  g_allocs[static_cast<const char*>(*p)] = n;
  return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  if (p == nullptr) return cudaSuccess;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_allocs.erase(static_cast<const char*>(p)) == 0) {
      std::fprintf(stderr, "emu: cudaFree of a pointer cudaMalloc did not return\n");
      std::abort();
    }
  }
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  if (n == 0) return cudaSuccess;
  if (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice) {
    CheckDevice(dst, n, "cudaMemcpy destination");
  }
  if (kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice) {
    CheckDevice(src, n, "cudaMemcpy source");
  }
  const char* d = static_cast<const char*>(dst);
  const char* s = static_cast<const char*>(src);
  if (d < s + n && s < d + n) {
    std::fprintf(stderr, "emu: cudaMemcpy between overlapping ranges (undefined in CUDA)\n");
    std::abort();
  }
  std::memcpy(dst, src, n);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind,
                            cudaStream_t) {
  return cudaMemcpy(dst, src, n, kind);
}

cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }

cudaError_t cudaGetDevice(int* device) {
  *device = g_device;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device != 0) return Fail(cudaErrorInvalidDevice);
  g_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr, int) {
  *value = 132;  // an H100/H200's multiprocessors, so split heuristics behave as there
  return cudaSuccess;
}

// ---- cuBLAS stand-ins ----

namespace {

double Load(const void* p, cudaDataType t, long long i) {
  if (t == CUDA_R_32F) return static_cast<const float*>(p)[i];
  const uint16_t h = static_cast<const uint16_t*>(p)[i];
  if (t == CUDA_R_16BF) {
    const uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  return static_cast<double>(__builtin_bit_cast(_Float16, h));
}

void Store(void* p, cudaDataType t, long long i, double v) {
  const float f = static_cast<float>(v);
  if (t == CUDA_R_32F) {
    static_cast<float*>(p)[i] = f;
  } else if (t == CUDA_R_16BF) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even (finite values only)
    static_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(u >> 16);
  } else {
    static_cast<uint16_t*>(p)[i] = __builtin_bit_cast(uint16_t, static_cast<_Float16>(f));
  }
}

long long ElemSize(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }

}  // namespace

const char* cublasGetStatusName(cublasStatus_t) { return "CUBLAS_STATUS_EMULATED"; }
const char* cublasGetStatusString(cublasStatus_t s) {
  return s == CUBLAS_STATUS_SUCCESS ? "success" : "emulated cuBLAS error";
}

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  *handle = reinterpret_cast<cublasHandle_t>(0x1);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }

cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
    const void* alpha, const void* A, cudaDataType at, int lda, long long stride_a, const void* B,
    cudaDataType bt, int ldb, long long stride_b, const void* beta, void* C, cudaDataType ct,
    int ldc, long long stride_c, int batch, cublasComputeType_t compute, cublasGemmAlgo_t) {
  // Stored shapes (column-major): A is arows x acols, B is brows x bcols, C is m x n.
  const int arows = ta == CUBLAS_OP_N ? m : k, acols = ta == CUBLAS_OP_N ? k : m;
  const int brows = tb == CUBLAS_OP_N ? k : n, bcols = tb == CUBLAS_OP_N ? n : k;
  if (m < 0 || n < 0 || k < 0 || batch < 0 || lda < std::max(1, arows) ||
      ldb < std::max(1, brows) || ldc < std::max(1, m)) {
    std::fprintf(stderr, "emu cuBLAS: invalid m %d n %d k %d lda %d ldb %d ldc %d\n", m, n, k, lda,
                 ldb, ldc);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (compute != CUBLAS_COMPUTE_32F || at != bt || (at == CUDA_R_32F && ct != CUDA_R_32F) ||
      (ct != CUDA_R_32F && ct != at)) {
    std::fprintf(stderr, "emu cuBLAS: unsupported types A %d B %d C %d\n", at, bt, ct);
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (batch > 1 && stride_c == 0) {
    std::fprintf(stderr, "emu cuBLAS: every batch writes the same C\n");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  for (int bi = 0; bi < batch; ++bi) {
    const char* a = static_cast<const char*>(A) + bi * stride_a * ElemSize(at);
    const char* b = static_cast<const char*>(B) + bi * stride_b * ElemSize(bt);
    char* c = static_cast<char*>(C) + bi * stride_c * ElemSize(ct);
    if (m > 0 && k > 0) {
      CheckDevice(a, (static_cast<long long>(acols - 1) * lda + arows) * ElemSize(at), "A");
    }
    if (n > 0 && k > 0) {
      CheckDevice(b, (static_cast<long long>(bcols - 1) * ldb + brows) * ElemSize(bt), "B");
    }
    if (m > 0 && n > 0) {
      CheckDevice(c, (static_cast<long long>(n - 1) * ldc + m) * ElemSize(ct), "C");
    }
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < m; ++i) {
        double acc = 0;
        for (int l = 0; l < k; ++l) {
          const double av = ta == CUBLAS_OP_N ? Load(a, at, i + static_cast<long long>(l) * lda)
                                              : Load(a, at, l + static_cast<long long>(i) * lda);
          const double bv = tb == CUBLAS_OP_N ? Load(b, bt, l + static_cast<long long>(j) * ldb)
                                              : Load(b, bt, j + static_cast<long long>(l) * ldb);
          acc += av * bv;
        }
        double v = al * acc;
        // beta == 0: C is not read (it may hold NaN garbage), as in cuBLAS.
        if (be != 0.f) v += be * Load(c, ct, i + static_cast<long long>(j) * ldc);
        Store(c, ct, i + static_cast<long long>(j) * ldc, v);
      }
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void* alpha, const void* A, cudaDataType at,
                            int lda, const void* B, cudaDataType bt, int ldb, const void* beta,
                            void* C, cudaDataType ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo) {
  return cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta,
                                    C, ct, ldc, 0, 1, compute, algo);
}
