// The module's own threads (background upgrades, the stream closer, a pre-fork server's directory)
// take no signal meant for the application: a thread started while this guard lives starts with every
// signal blocked (it inherits the creating thread's mask), and the creating thread gets its own mask
// back at the guard's end.
#pragma once

#include <pthread.h>
#include <signal.h>

namespace tcp2rdma::preload {

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

}  // namespace tcp2rdma::preload
