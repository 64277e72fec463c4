#include "signal_restart.h"

#include <signal.h>

#include <cerrno>

namespace tcp2rdma::preload {

bool interrupted_call_fails() noexcept {
  int saved_errno = errno;
  bool fails = false;
  for (int sig = 1; sig < NSIG && !fails; ++sig) {
    struct sigaction action {};
    // glibc refuses its own internal signals (EINVAL): they are not the application's.
    if (sig == SIGKILL || sig == SIGSTOP || ::sigaction(sig, nullptr, &action) != 0) continue;
    bool caught = (action.sa_flags & SA_SIGINFO) != 0 ||
                  (action.sa_handler != SIG_DFL && action.sa_handler != SIG_IGN);
    fails = caught && (action.sa_flags & SA_RESTART) == 0;
  }
  errno = saved_errno;
  return fails;
}

}  // namespace tcp2rdma::preload
