#include "kernels/cpu/thread_pool.h"

#include <omp.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace cctune::cpu {
namespace {

TEST(ThreadPoolTest, EveryTaskRunsOnceUnderManyTinyJobs) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(13);
  for (int job = 0; job < 20000; ++job) {
    const int n = 1 + job % 13;
    pool.Run(n, [&](int t, int num_tasks) {
      ASSERT_EQ(num_tasks, n);
      hits[t].fetch_add(1, std::memory_order_relaxed);
    });
  }
  // Task t runs in every job with n > t, i.e. for n in [t + 1, 13].
  for (int t = 0; t < 13; ++t) {
    int expected = 0;
    for (int job = 0; job < 20000; ++job) expected += (1 + job % 13) > t;
    EXPECT_EQ(hits[t].load(), expected) << "task " << t;
  }
}

TEST(ThreadPoolTest, DynamicRunsEveryTaskOnceUnderManyJobs) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(40);
  for (int job = 0; job < 20000; ++job) {
    const int n = 1 + job % 40;
    pool.RunDynamic(n, [&](int t, int num_tasks) {
      ASSERT_EQ(num_tasks, n);
      hits[t].fetch_add(1, std::memory_order_relaxed);
    });
    // Alternate with fixed-share jobs: the pool's mode is per job.
    if (job % 7 == 0) pool.Run(3, [&](int, int) {});
  }
  for (int t = 0; t < 40; ++t) {
    int expected = 0;
    for (int job = 0; job < 20000; ++job) expected += (1 + job % 40) > t;
    EXPECT_EQ(hits[t].load(), expected) << "task " << t;
  }
}

TEST(ThreadPoolTest, DynamicGivesASlowParticipantFewerTasks) {
  ThreadPool pool(2);
  std::atomic<int> on_caller{0}, total{0};
  const std::thread::id caller = std::this_thread::get_id();
  pool.RunDynamic(64, [&](int t, int) {
    total.fetch_add(1);
    if (std::this_thread::get_id() == caller) {
      on_caller.fetch_add(1);
      // The caller is held up in its first task; the worker should take (nearly) all the rest.
      if (on_caller.load() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    (void)t;
  });
  EXPECT_EQ(total.load(), 64);
  // With fixed shares the caller would run 32 of them.
  EXPECT_LT(on_caller.load(), 16);
}

TEST(ThreadPoolTest, ResultsOfAJobAreVisibleAfterRun) {
  ThreadPool pool(3);
  std::vector<int64_t> out(3 * 1000);
  for (int rep = 0; rep < 200; ++rep) {
    pool.Run(3, [&](int t, int) {
      for (int i = 0; i < 1000; ++i) out[t * 1000 + i] = static_cast<int64_t>(rep) * i + t;
    });
    for (int t = 0; t < 3; ++t) {
      for (int i = 0; i < 1000; i += 97) ASSERT_EQ(out[t * 1000 + i], int64_t{rep} * i + t);
    }
  }
}

TEST(ThreadPoolTest, OneTaskPerParticipantRunsOnDistinctThreads) {
  ThreadPool pool(3);
  std::vector<std::thread::id> ids(3);
  pool.Run(3, [&](int t, int) { ids[t] = std::this_thread::get_id(); });
  EXPECT_EQ(ids[0], std::this_thread::get_id());  // the caller is participant 0
  EXPECT_EQ(std::set<std::thread::id>(ids.begin(), ids.end()).size(), 3u);
}

TEST(ThreadPoolTest, NestedCallsRunInline) {
  ThreadPool pool(2);
  std::vector<std::atomic<int>> inner(2 * 5);
  pool.Run(2, [&](int t, int) {
    EXPECT_TRUE(ThreadPool::InsideTask());
    const std::thread::id self = std::this_thread::get_id();
    pool.Run(5, [&](int u, int n) {
      EXPECT_EQ(n, 5);
      EXPECT_EQ(std::this_thread::get_id(), self);
      inner[t * 5 + u].fetch_add(1);
    });
  });
  for (int i = 0; i < 10; ++i) EXPECT_EQ(inner[i].load(), 1) << i;
  EXPECT_FALSE(ThreadPool::InsideTask());
}

TEST(ThreadPoolTest, InsideAnOpenMpRegionRunsInline) {
  ThreadPool pool(2);
  std::atomic<int> wrong_thread{0}, runs{0}, team{0};
#pragma omp parallel num_threads(2)
  {
    team.fetch_add(1);
    const std::thread::id self = std::this_thread::get_id();
    pool.Run(2, [&](int, int) {
      if (std::this_thread::get_id() != self) wrong_thread.fetch_add(1);
      runs.fetch_add(1);
    });
  }
  EXPECT_EQ(wrong_thread.load(), 0);
  EXPECT_EQ(runs.load(), 2 * team.load());
}

TEST(ThreadPoolTest, ConcurrentCallersFromTwoThreadsAreBothCorrect) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum_a{0}, sum_b{0};
  auto caller = [&](std::atomic<int64_t>* sum) {
    for (int job = 0; job < 5000; ++job) {
      pool.Run(4, [&](int t, int) { sum->fetch_add(t + 1); });
    }
  };
  std::thread a(caller, &sum_a), b(caller, &sum_b);
  a.join();
  b.join();
  EXPECT_EQ(sum_a.load(), 5000 * 10);
  EXPECT_EQ(sum_b.load(), 5000 * 10);
}

TEST(ThreadPoolTest, PoolOfOneRunsOnTheCaller) {
  for (int n : {1, 0, -3}) {
    ThreadPool pool(n);
    EXPECT_EQ(pool.num_threads(), 1);
    std::vector<int> order;
    const std::thread::id self = std::this_thread::get_id();
    pool.Run(4, [&](int t, int) {
      EXPECT_EQ(std::this_thread::get_id(), self);
      order.push_back(t);
    });
    EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
  }
}

TEST(ThreadPoolTest, ZeroTasksDoNothing) {
  ThreadPool pool(2);
  int calls = 0;
  pool.Run(0, [&](int, int) { ++calls; });
  EXPECT_EQ(calls, 0);
}

TEST(ThreadPoolTest, WorkersThatFellAsleepWakeForTheNextJob) {
  ThreadPool pool(3);
  for (int rep = 0; rep < 3; ++rep) {
    // Longer than the spin: the workers are asleep on the condition variable.
    std::this_thread::sleep_for(std::chrono::microseconds(20 * ThreadPool::kSpinMicros));
    std::vector<std::thread::id> ids(3);
    pool.Run(3, [&](int t, int) { ids[t] = std::this_thread::get_id(); });
    EXPECT_EQ(std::set<std::thread::id>(ids.begin(), ids.end()).size(), 3u);
  }
}

TEST(ThreadPoolTest, DefaultHasOpenMpsThreadCount) {
  EXPECT_EQ(ThreadPool::Default().num_threads(), omp_get_max_threads());
  EXPECT_EQ(&ThreadPool::Default(), &ThreadPool::Default());
}

}  // namespace
}  // namespace cctune::cpu
