// The CUDA execution model on the CPU, for checking kernel logic on machines without a GPU.
//
// run_emu.sh rewrites each `kernel<<<grid, block, smem, stream>>>(args)` of the .cu files into
// emu::Launch(kernel, emu::LaunchConfig(grid, block, smem, stream), args). Blocks run one after
// another; the threads of a block are cooperative fibers that switch only at __syncthreads and
// warp shuffles. Those are real barriers: a block whose threads cannot all reach the same
// barrier (divergent __syncthreads, a shuffle without the whole warp) aborts with "deadlock".
// `__shared__` variables become function statics, which is block-shared because blocks never
// overlap. What this cannot find: races that need true concurrency (a missing barrier between
// a shared-memory write and another thread's read goes unnoticed), and hardware numerics.
#ifndef CCTUNE_KERNELS_CUDA_EMU_EMU_H_
#define CCTUNE_KERNELS_CUDA_EMU_EMU_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cuda_runtime_api.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __shared__ static
using std::isnan;

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};

// vector_types.h's 16-byte vector (one 128-bit load).
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};

namespace emu {

dim3 ThreadIdx();
dim3 BlockIdx();
dim3 BlockDim();
dim3 GridDim();
void SyncThreads();
// Every lane of the calling warp publishes `v`; returns lane `src_lane`'s value.
uint64_t WarpExchange(uint64_t v, int src_lane);
void* DynamicSharedRaw();
template <typename T>
T* DynamicShared() {
  return static_cast<T*>(DynamicSharedRaw());
}

struct LaunchConfig {
  dim3 grid, block;
  size_t smem;
  LaunchConfig(dim3 g, dim3 b, size_t s = 0, cudaStream_t = nullptr) : grid(g), block(b), smem(s) {}
};

// Runs `thread_fn(ctx)` for every thread of the grid; an invalid configuration sets the
// error cudaGetLastError() reports, as a real launch does.
void RunGrid(const LaunchConfig& cfg, void (*thread_fn)(void*), void* ctx);

template <typename... KArgs, typename... Args>
void Launch(void (*kernel)(KArgs...), LaunchConfig cfg, Args&&... args) {
  struct Ctx {
    void (*kernel)(KArgs...);
    std::tuple<std::decay_t<KArgs>...> params;
  };
  Ctx ctx{kernel, std::tuple<std::decay_t<KArgs>...>(static_cast<KArgs>(args)...)};
  RunGrid(
      cfg,
      [](void* p) {
        Ctx* c = static_cast<Ctx*>(p);
        auto params = c->params;  // each thread gets its own copy of the parameters
        std::apply(c->kernel, params);
      },
      &ctx);
}

}  // namespace emu

#define threadIdx (::emu::ThreadIdx())
#define blockIdx (::emu::BlockIdx())
#define blockDim (::emu::BlockDim())
#define gridDim (::emu::GridDim())

inline void __syncthreads() { ::emu::SyncThreads(); }

template <typename T>
T __shfl_xor_sync(unsigned, T v, int lane_mask) {
  static_assert(sizeof(T) <= 8, "shuffles of more than 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  const int lane = static_cast<int>(::emu::ThreadIdx().x & 31);
  bits = ::emu::WarpExchange(bits, lane ^ lane_mask);
  T r;
  std::memcpy(&r, &bits, sizeof(T));
  return r;
}

inline float __uint_as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t __float_as_uint(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __fmul_rn(float a, float b) { return a * b; }

#endif  // CCTUNE_KERNELS_CUDA_EMU_EMU_H_
