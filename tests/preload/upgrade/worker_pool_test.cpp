// The upgrade engine's pool (preload/upgrade/worker_pool.h): every job runs once, no more threads than
// its size however many jobs wait, idle threads end, and a job may queue another.
#include "upgrade/worker_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace tcp2rdma::preload {
namespace {

using namespace std::chrono_literals;

// Waits up to 10 s for `done`; false if it never came.
template <class Done>
bool eventually(Done done) {
  auto until = std::chrono::steady_clock::now() + 10s;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// submit() takes a job from a std::function the caller holds.
template <class Job>
bool submit(WorkerPool& pool, Job job) {
  std::function<void()> f = std::move(job);
  return pool.submit(f);
}

// A pool's threads use it until they end: a test's pool outlives them (the module's are never freed).
void until_threads_end(const WorkerPool& pool) { ASSERT_TRUE(eventually([&] { return pool.threads() == 0; })); }

TEST(WorkerPool, RunsEveryJobOnceWithNoMoreThreadsThanItsSize) {
  WorkerPool pool(4, 200);
  std::atomic<int> running{0}, most{0}, done{0};
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(submit(pool, [&] {
      int now = ++running;
      int seen = most.load();
      while (now > seen && !most.compare_exchange_weak(seen, now)) {
      }
      std::this_thread::sleep_for(100us);
      --running;
      ++done;
    }));
    EXPECT_LE(pool.threads(), 4);
  }
  ASSERT_TRUE(eventually([&] { return done.load() == 200; }));
  EXPECT_LE(most.load(), 4);
  EXPECT_GE(most.load(), 1);
  EXPECT_EQ(pool.queued(), 0u);
  until_threads_end(pool);
}

// Jobs that wait on each other beyond the pool's size would never end: the pool's size is what the
// two-pool design of background.cpp relies on. Here, exactly `size` blocked jobs all run at once.
TEST(WorkerPool, AsManyJobsAsThreadsRunAtOnce) {
  WorkerPool pool(3, 200);
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  std::atomic<int> done{0};
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(submit(pool, [&] {
      std::unique_lock lock(mu);
      ++arrived;
      cv.notify_all();
      cv.wait_for(lock, 10s, [&] { return arrived == 3; });
      if (arrived == 3) ++done;
    }));
  }
  ASSERT_TRUE(eventually([&] { return done.load() == 3; }));
  until_threads_end(pool);
}

TEST(WorkerPool, IdleThreadsEndAndComeBack) {
  WorkerPool pool(2, 50);
  std::atomic<int> done{0};
  ASSERT_TRUE(submit(pool, [&] { ++done; }));
  ASSERT_TRUE(eventually([&] { return done.load() == 1; }));
  ASSERT_TRUE(eventually([&] { return pool.threads() == 0; }));
  ASSERT_TRUE(submit(pool, [&] { ++done; }));
  ASSERT_TRUE(eventually([&] { return done.load() == 2; }));
  until_threads_end(pool);
}

TEST(WorkerPool, AJobMayQueueAnother) {
  WorkerPool pool(1, 200);
  std::atomic<int> done{0};
  ASSERT_TRUE(submit(pool, [&] {
    ++done;
    EXPECT_TRUE(submit(pool, [&] { ++done; }));
  }));
  ASSERT_TRUE(eventually([&] { return done.load() == 2; }));
  until_threads_end(pool);
}

}  // namespace
}  // namespace tcp2rdma::preload
