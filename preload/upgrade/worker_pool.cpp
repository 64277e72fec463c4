#include "upgrade/worker_pool.h"

#include <chrono>
#include <thread>
#include <utility>

#include "util/quiet_thread.h"

namespace tcp2rdma::preload {

bool WorkerPool::submit(std::function<void()>& job) noexcept {
  std::unique_lock lock(mu_);
  try {
    queue_.push_back(std::move(job));  // on failure nothing was moved (the deque's strong guarantee)
  } catch (const std::bad_alloc&) {
    return false;
  }
  // A thread idle now takes it; else one more thread, while the pool has room for one.
  if (idle_ > static_cast<int>(queue_.size()) - 1 || threads_ >= max_threads_) {
    work_.notify_one();
    return true;
  }
  ++threads_;
  lock.unlock();
  std::thread thread = start_quiet_thread([this] { run(); });
  if (thread.joinable()) {
    thread.detach();
    return true;
  }
  lock.lock();
  --threads_;
  if (threads_ > 0) return true;  // the threads there are will come to it
  job = std::move(queue_.back());  // nobody will: back to the caller
  queue_.pop_back();
  return false;
}

void WorkerPool::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    ++idle_;
    bool woke = work_.wait_for(lock, std::chrono::milliseconds(linger_ms_), [this] { return !queue_.empty(); });
    --idle_;
    if (!woke) break;
    std::function<void()> job = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    job();
    job = nullptr;  // what the job captured goes before the next wait
    lock.lock();
  }
  --threads_;
}

size_t WorkerPool::queued() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

int WorkerPool::threads() const {
  std::lock_guard lock(mu_);
  return threads_;
}

}  // namespace tcp2rdma::preload
