#include "kernels/cpu/thread_pool.h"

#include <omp.h>

#include <chrono>

namespace cctune::cpu {

namespace {

thread_local bool tls_inside_task = false;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

// Waits until pred() or until kSpinMicros have passed: pause instructions for the first
// kPureSpinMicros, then a yield() per round, so that on an oversubscribed machine a waiting
// thread hands its core to the one it waits for. The clock is read every 64 pauses
// (steady_clock is a vDSO call, not a system call).
constexpr int64_t kPureSpinMicros = 20;

template <typename Pred>
bool SpinFor(Pred pred) {
  const auto start = std::chrono::steady_clock::now();
  const auto yield_from = start + std::chrono::microseconds(kPureSpinMicros);
  const auto deadline = start + std::chrono::microseconds(ThreadPool::kSpinMicros);
  while (true) {
    for (int i = 0; i < 64; ++i) {
      if (pred()) return true;
      CpuRelax();
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return pred();
    if (now >= yield_from) std::this_thread::yield();
  }
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(num_threads < 1 ? 1 : num_threads) {
  workers_.reserve(num_threads_ - 1);
  for (int p = 1; p < num_threads_; ++p) workers_.emplace_back([this, p] { WorkerLoop(p); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

ThreadPool& ThreadPool::Default() {
  static ThreadPool* const pool = new ThreadPool(omp_get_max_threads());
  return *pool;
}

bool ThreadPool::InsideTask() { return tls_inside_task; }

void ThreadPool::RunShare(int participant) {
  if (dynamic_) {
    for (int t = next_task_.fetch_add(1, std::memory_order_relaxed); t < num_tasks_;
         t = next_task_.fetch_add(1, std::memory_order_relaxed)) {
      fn_(ctx_, t, num_tasks_);
    }
    return;
  }
  for (int t = participant; t < num_tasks_; t += num_threads_) fn_(ctx_, t, num_tasks_);
}

void ThreadPool::RunImpl(int num_tasks, TaskFn fn, void* ctx, bool dynamic) {
  if (num_tasks <= 0) return;
  bool expected = false;
  const bool inline_only = num_threads_ == 1 || num_tasks == 1 || tls_inside_task ||
                           omp_in_parallel() ||
                           !busy_.compare_exchange_strong(expected, true, std::memory_order_acquire);
  if (inline_only) {
    const bool was_inside = tls_inside_task;
    tls_inside_task = true;
    for (int t = 0; t < num_tasks; ++t) fn(ctx, t, num_tasks);
    tls_inside_task = was_inside;
    return;
  }
  fn_ = fn;
  ctx_ = ctx;
  num_tasks_ = num_tasks;
  dynamic_ = dynamic;
  next_task_.store(0, std::memory_order_relaxed);
  pending_.store(num_threads_ - 1, std::memory_order_relaxed);
  // seq_cst: pairs with the worker's sleepers_ increment (one of the two sees the other).
  epoch_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
  tls_inside_task = true;
  RunShare(0);
  tls_inside_task = false;
  // The shares are balanced, so the wait is short; a descheduled worker (an oversubscribed
  // machine) gets the core back through yield().
  while (!SpinFor([&] { return pending_.load(std::memory_order_acquire) == 0; })) {
    std::this_thread::yield();
  }
  busy_.store(false, std::memory_order_release);
}

void ThreadPool::WorkerLoop(int participant) {
  tls_inside_task = true;
  uint64_t seen = 0;
  while (true) {
    auto has_job = [&] { return epoch_.load(std::memory_order_acquire) != seen; };
    if (!SpinFor(has_job)) {
      std::unique_lock<std::mutex> lock(mu_);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      cv_.wait(lock, [&] { return stop_.load() || has_job(); });
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
    }
    if (stop_.load()) return;
    seen = epoch_.load(std::memory_order_acquire);
    RunShare(participant);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace cctune::cpu
