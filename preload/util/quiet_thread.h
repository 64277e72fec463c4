// The module's own threads (background upgrades, the stream closer, a pre-fork server's directory)
// take no signal meant for the application: each starts with every signal blocked.
#pragma once

#include <pthread.h>
#include <signal.h>

#include <exception>
#include <thread>
#include <utility>

namespace tcp2rdma::preload {

// A thread started while this guard lives starts with every signal blocked (it inherits the creating
// thread's mask), and the creating thread gets its own mask back at the guard's end.

class AllSignalsBlocked {
 public:
  AllSignalsBlocked() noexcept {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous_);
  }
  ~AllSignalsBlocked() { pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }
  AllSignalsBlocked(const AllSignalsBlocked&) = delete;
  AllSignalsBlocked& operator=(const AllSignalsBlocked&) = delete;

 private:
  sigset_t previous_;
};

// Runs `body` on a new thread of the module's own. A thread that cannot be had (no threads left, no
// memory) comes back not joinable: the caller says what happens instead.
template <class Body>
std::thread start_quiet_thread(Body&& body) noexcept {
  AllSignalsBlocked quiet;
  try {
    return std::thread(std::forward<Body>(body));
  } catch (const std::exception&) {  // std::system_error, std::bad_alloc
    return std::thread();
  }
}

}  // namespace tcp2rdma::preload
