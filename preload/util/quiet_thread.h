// The module's own threads (background upgrades, the stream closer, a pre-fork server's directory)
// take no signal meant for the application: each runs with every signal blocked.
#pragma once

#include <pthread.h>
#include <signal.h>

#include <exception>
#include <functional>
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
//
// The application's threads do not create ours: glibc's pthread_create blocks every signal in the
// creating thread around its clone, and a child's SIGCHLD (ignored by default) sent to that thread
// meanwhile is then kept instead of discarded, and handed to another thread, whose epoll_wait fails
// with EINTR. A starter thread of the module's, every signal blocked for good, creates them; only
// its own creation (on first use in a process, and again after each change of its credentials, so
// that the threads it makes share the cred object of the thread that goes on) holds an application's
// thread so, and then only around the clone (the rest of it under signals_held_while_starting).
std::thread start_module_thread(std::function<void()> body) noexcept;

template <class Body>
std::thread start_quiet_thread(Body&& body) noexcept {
  try {
    return start_module_thread(std::function<void()>(std::forward<Body>(body)));
  } catch (const std::exception&) {  // std::bad_alloc
    return std::thread();
  }
}

}  // namespace tcp2rdma::preload
