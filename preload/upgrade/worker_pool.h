// A few threads that run upgrades one after another (docs/links.md, "The upgrade engine"): a
// connection waits in the queue, on TCP, instead of being refused, and a process never has more
// upgrade threads than the pool's size, however many connections it opens at once.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>

namespace tcp2rdma::preload {

class WorkerPool {
 public:
  // At most `max_threads` threads, started as the queue needs them; one idle for `linger_ms` ends.
  WorkerPool(int max_threads, int linger_ms) : max_threads_(max_threads), linger_ms_(linger_ms) {}
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues `job` (taken from the caller). False when the pool has no thread and cannot start one (none
  // left, no memory): `job` is left to the caller, who says what happens instead. A job must not throw.
  bool submit(std::function<void()>& job) noexcept;

  // What the pool holds now (tests and the log).
  size_t queued() const;
  int threads() const;

 private:
  void run();

  const int max_threads_;
  const int linger_ms_;
  mutable std::mutex mu_;
  std::condition_variable work_;
  std::deque<std::function<void()>> queue_;
  int threads_ = 0;
  int idle_ = 0;
};

}  // namespace tcp2rdma::preload
