// A persistent CPU thread pool with a cheap fork/join, for the per-token work of decode.
//
// OpenMP's parallel regions end in a barrier whose idle threads spin (libgomp's default wait
// policy) or sleep in the kernel (OMP_WAIT_POLICY=passive); a decode step runs a few hundred
// short GEMVs, and perf showed 12% of decode time spinning in those barriers. This pool keeps
// its workers alive between calls: Run() publishes one job (a generation counter), every
// participant runs its share, and the caller waits for a single counter of finished workers.
// No allocation, no lock and no system call on that path while the workers are awake. An idle
// worker spins (pause instructions, then yields) for kSpinMicros after its last job, then sleeps on a
// condition variable, so an idle process uses no CPU; waking a sleeping worker is the one
// case that takes a lock and a futex call.
//
//   ThreadPool& pool = ThreadPool::Default();          // OMP_NUM_THREADS participants
//   pool.Run(pool.num_threads(), [&](int task, int num_tasks) { ... });
//
// Rules:
// - Run() is for the caller's thread and the pool's workers together: task t of num_tasks runs
//   on participant t % num_threads() (the caller is participant 0), so with num_tasks ==
//   num_threads() each participant runs exactly one task.
// - Nested calls run inline: Run() from inside a task, from inside an OpenMP parallel region,
//   or while another thread is running a job on this pool, runs every task on the calling
//   thread, in order (still correct, never a deadlock).
// - Tasks must not throw (the project does not use exceptions; an escaping exception reaches
//   std::terminate, as in any std::thread).
// - A pool of 1 has no workers: Run() calls the tasks in order on the caller's thread.
#ifndef CCTUNE_KERNELS_CPU_THREAD_POOL_H_
#define CCTUNE_KERNELS_CPU_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace cctune::cpu {

class ThreadPool {
 public:
  // How long an idle worker spins before it sleeps.
  static constexpr int64_t kSpinMicros = 200;

  // num_threads participants in all: the caller of Run() and num_threads - 1 workers.
  // num_threads < 1 is treated as 1.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Calls fn(task, num_tasks) for every task in [0, num_tasks) and returns when all are done.
  // fn is called as void(int task, int num_tasks); it is not copied.
  template <typename Fn>
  void Run(int num_tasks, Fn&& fn) {
    Dispatch(num_tasks, fn, /*dynamic=*/false);
  }

  // Calls fn(task, num_tasks) for every task in [0, num_tasks), handing tasks out in order to
  // whichever participant is free (one atomic increment per task), and returns when all are
  // done. For work split into more pieces than participants so that a participant slowed by
  // the machine (another process on its core, a slower memory channel) takes fewer of them:
  // with Run()'s fixed shares the others wait for it at the end.
  template <typename Fn>
  void RunDynamic(int num_tasks, Fn&& fn) {
    Dispatch(num_tasks, fn, /*dynamic=*/true);
  }

  // The process-wide pool, created on first use with omp_get_max_threads() participants
  // (OMP_NUM_THREADS, or the number of CPUs). Never destroyed (its workers sleep at exit).
  static ThreadPool& Default();

  // True on a pool worker, and on any thread while it runs tasks of a Run() call.
  static bool InsideTask();

 private:
  using TaskFn = void (*)(void* ctx, int task, int num_tasks);

  template <typename F>
  void Dispatch(int num_tasks, F& fn, bool dynamic) {
    RunImpl(num_tasks, [](void* ctx, int t, int n) { (*static_cast<F*>(ctx))(t, n); },
            const_cast<void*>(static_cast<const void*>(&fn)), dynamic);
  }
  void RunImpl(int num_tasks, TaskFn fn, void* ctx, bool dynamic);
  void RunShare(int participant);
  void WorkerLoop(int participant);

  const int num_threads_;
  std::vector<std::thread> workers_;

  // The published job; written by the caller before `epoch_` is bumped.
  TaskFn fn_ = nullptr;
  void* ctx_ = nullptr;
  int num_tasks_ = 0;
  bool dynamic_ = false;
  // The next task to hand out (RunDynamic).
  alignas(64) std::atomic<int> next_task_{0};

  // Bumped once per job; workers run the job when they see a new value.
  alignas(64) std::atomic<uint64_t> epoch_{0};
  // Workers still running the current job.
  alignas(64) std::atomic<int> pending_{0};
  // Set while a Run() owns the pool (a second caller runs inline instead).
  alignas(64) std::atomic<bool> busy_{false};
  // Workers asleep (or about to sleep) on cv_.
  alignas(64) std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
};

}  // namespace cctune::cpu

#endif  // CCTUNE_KERNELS_CPU_THREAD_POOL_H_
