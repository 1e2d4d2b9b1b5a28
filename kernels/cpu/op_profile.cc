#include "kernels/cpu/op_profile.h"

#include <atomic>
#include <mutex>

namespace cctune::cpu {
namespace {

std::atomic<bool> g_enabled{false};
std::mutex g_mu;
OpProfile g_profile;  // guarded by g_mu

thread_local double* tl_child_seconds = nullptr;  // the enclosing timer's child total
thread_local int tl_category_override = -1;

}  // namespace

const char* OpCategoryName(OpCategory c) {
  switch (c) {
    case OpCategory::kGemmForward:
      return "gemm forward (x.W^T)";
    case OpCategory::kGemmBackwardDx:
      return "gemm backward dX (dY.W)";
    case OpCategory::kGemmBackwardDw:
      return "gemm backward dW (dY^T.X)";
    case OpCategory::kAttentionForward:
      return "attention forward";
    case OpCategory::kAttentionBackward:
      return "attention backward";
    case OpCategory::kElementwiseForward:
      return "elementwise forward";
    case OpCategory::kElementwiseBackward:
      return "elementwise backward";
    case OpCategory::kLoss:
      return "loss (cross-entropy f+b)";
    case OpCategory::kOptimizer:
      return "optimizer (norm, clip, AdamW)";
    case OpCategory::kData:
      return "data (batch checks, labels)";
    case OpCategory::kNumCategories:
      break;
  }
  return "?";
}

void SetOpProfiling(bool enabled) { g_enabled.store(enabled, std::memory_order_relaxed); }
bool OpProfilingEnabled() { return g_enabled.load(std::memory_order_relaxed); }

void ResetOpProfile() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_profile = OpProfile{};
}

OpProfile OpProfileSnapshot() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_profile;
}

ScopedOpTimer::ScopedOpTimer(OpCategory category, double flops, double bytes)
    : category_(category), flops_(flops), bytes_(bytes) {
  if (!OpProfilingEnabled()) return;
  active_ = true;
  if (tl_category_override >= 0) category_ = static_cast<OpCategory>(tl_category_override);
  parent_child_seconds_ = tl_child_seconds;
  tl_child_seconds = &child_seconds_;
  start_ = std::chrono::steady_clock::now();
}

ScopedOpTimer::~ScopedOpTimer() {
  if (!active_) return;
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  tl_child_seconds = parent_child_seconds_;
  if (parent_child_seconds_ != nullptr) *parent_child_seconds_ += elapsed;
  std::lock_guard<std::mutex> lock(g_mu);
  OpStats& s = g_profile[static_cast<int>(category_)];
  s.seconds += elapsed - child_seconds_;
  s.flops += flops_;
  s.bytes += bytes_;
  ++s.calls;
}

ScopedOpCategory::ScopedOpCategory(OpCategory category) : previous_(tl_category_override) {
  tl_category_override = static_cast<int>(category);
}

ScopedOpCategory::~ScopedOpCategory() { tl_category_override = previous_; }

}  // namespace cctune::cpu
