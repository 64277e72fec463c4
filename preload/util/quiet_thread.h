// The module's own threads (background upgrades, the stream closer, a pre-fork server's directory)
// take no signal meant for the application: each runs with every signal blocked.
#pragma once

#include <pthread.h>
#include <signal.h>

#include <exception>
#include <thread>
#include <utility>

namespace tcp2rdma::preload {

// What the thread that starts one of ours blocks meanwhile (the new thread inherits its mask): every
// signal but those the kernel discards on arrival (SIG_IGN, and the default of SIGCHLD, SIGCONT,
// SIGURG and SIGWINCH). A signal blocked in the thread it is sent to is kept instead of discarded,
// and the kernel then hands it to another thread of the process, whose epoll_wait or poll returns
// EINTR for a signal the application ignores: a child that exited while its parent's thread started
// ours did that.
sigset_t signals_held_while_starting() noexcept;

// The calling thread's mask is `held` until the guard ends, then what it was.
class SignalsHeld {
 public:
  explicit SignalsHeld(const sigset_t& held) noexcept { pthread_sigmask(SIG_SETMASK, &held, &previous_); }
  ~SignalsHeld() { pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }
  SignalsHeld(const SignalsHeld&) = delete;
  SignalsHeld& operator=(const SignalsHeld&) = delete;

 private:
  sigset_t previous_;
};

// Blocks every signal in the calling thread: a module thread's first step, since the application may
// give an ignored signal a handler later.
void block_all_signals() noexcept;

// Runs `body` on a new thread of the module's own. A thread that cannot be had (no threads left, no
// memory) comes back not joinable: the caller says what happens instead.
template <class Body>
std::thread start_quiet_thread(Body&& body) noexcept {
  SignalsHeld quiet(signals_held_while_starting());
  try {
    return std::thread([body = std::forward<Body>(body)]() mutable {
      block_all_signals();
      body();
    });
  } catch (const std::exception&) {  // std::system_error, std::bad_alloc
    return std::thread();
  }
}

}  // namespace tcp2rdma::preload
