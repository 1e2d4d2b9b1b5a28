// Per-category time, FLOPs and bytes of the CPU backend's ops, for the training benchmark's
// step profile (benchmarks/train_bench.cc). Off by default: a disabled ScopedOpTimer costs
// one relaxed atomic load.
//
// Time is exclusive: a timer nested inside another (LinearBackward's dX and dW GEMMs inside
// the LinearBackward op) is subtracted from its parent, so every second is counted once and
// the categories add up to the time spent inside timed ops. ScopedOpCategory files every
// timer opened inside it (on this thread) under one category, e.g. the optimizer's norm,
// clip and update under kOptimizer. Only the thread that calls an op records (ops are called
// from one thread; their OpenMP/ThreadPool workers do not open timers).
#ifndef CCTUNE_KERNELS_CPU_OP_PROFILE_H_
#define CCTUNE_KERNELS_CPU_OP_PROFILE_H_

#include <array>
#include <chrono>
#include <cstdint>

namespace cctune::cpu {

enum class OpCategory : int {
  kGemmForward,          // Linear / Matmul forward: x·Wᵀ
  kGemmBackwardDx,       // dY·W
  kGemmBackwardDw,       // dYᵀ·X
  kAttentionForward,     // scaled-dot-product attention (QKᵀ, softmax, PV)
  kAttentionBackward,
  kElementwiseForward,   // norms, RoPE, SwiGLU, residual adds, embedding lookup, dropout
  kElementwiseBackward,  // their backwards (and a linear's bias gradient)
  kLoss,                 // cross-entropy forward and backward
  kOptimizer,            // gradient norm, clipping, the parameter update
  kData,                 // the batch: checks, moving it to the model's device, label count
  kNumCategories,
};
constexpr int kNumOpCategories = static_cast<int>(OpCategory::kNumCategories);

const char* OpCategoryName(OpCategory c);

struct OpStats {
  double seconds = 0;  // exclusive wall time
  double flops = 0;    // as counted by the op (2·m·n·k for a GEMM)
  double bytes = 0;    // tensor bytes read + written, as counted by the op
  int64_t calls = 0;
};
using OpProfile = std::array<OpStats, kNumOpCategories>;

void SetOpProfiling(bool enabled);
bool OpProfilingEnabled();
void ResetOpProfile();
OpProfile OpProfileSnapshot();

class ScopedOpTimer {
 public:
  ScopedOpTimer(OpCategory category, double flops, double bytes);
  ~ScopedOpTimer();
  ScopedOpTimer(const ScopedOpTimer&) = delete;
  ScopedOpTimer& operator=(const ScopedOpTimer&) = delete;

 private:
  bool active_ = false;
  OpCategory category_;
  double flops_, bytes_;
  double child_seconds_ = 0;
  double* parent_child_seconds_ = nullptr;
  std::chrono::steady_clock::time_point start_;
};

// Files the timers opened on this thread while it lives under `category` (nests; the
// innermost wins).
class ScopedOpCategory {
 public:
  explicit ScopedOpCategory(OpCategory category);
  ~ScopedOpCategory();
  ScopedOpCategory(const ScopedOpCategory&) = delete;
  ScopedOpCategory& operator=(const ScopedOpCategory&) = delete;

 private:
  int previous_;
};

}  // namespace cctune::cpu

#endif  // CCTUNE_KERNELS_CPU_OP_PROFILE_H_
