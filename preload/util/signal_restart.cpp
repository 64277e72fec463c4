#include "util/signal_restart.h"

#include <signal.h>

#include <cerrno>

#include "util/saved_errno.h"

namespace tcp2rdma::preload {

namespace {

// Signals the kernel raises for a fault of the thread that receives them: they never come while it
// sleeps in a system call. Their handlers (AddressSanitizer's, a JVM's) say nothing about restarts.
bool raised_by_a_fault(int sig) {
  return sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL || sig == SIGTRAP || sig == SIGSYS;
}

}  // namespace

bool interrupted_call_fails() noexcept {
  SavedErrno keep_errno;
  bool fails = false;
  for (int sig = 1; sig < NSIG && !fails; ++sig) {
    struct sigaction action {};
    if (sig == SIGKILL || sig == SIGSTOP || raised_by_a_fault(sig)) continue;
    // glibc refuses its own internal signals (EINVAL): they are not the application's.
    if (::sigaction(sig, nullptr, &action) != 0) continue;
    bool caught = (action.sa_flags & SA_SIGINFO) != 0 ||
                  (action.sa_handler != SIG_DFL && action.sa_handler != SIG_IGN);
    fails = caught && (action.sa_flags & SA_RESTART) == 0;
  }
  return fails;
}

}  // namespace tcp2rdma::preload
