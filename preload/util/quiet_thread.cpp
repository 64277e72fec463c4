#include "util/quiet_thread.h"

#include "util/saved_errno.h"

namespace tcp2rdma::preload {

namespace {

// The signals whose default action is to be ignored: the kernel discards them on arrival, unless
// they are blocked.
bool ignored_by_default(int sig) { return sig == SIGCHLD || sig == SIGCONT || sig == SIGURG || sig == SIGWINCH; }

}  // namespace

sigset_t signals_held_while_starting() noexcept {
  SavedErrno keep_errno;
  sigset_t held;
  sigfillset(&held);
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction action {};
    // glibc refuses its own internal signals (EINVAL): they stay blocked, as sigfillset leaves them.
    if (::sigaction(sig, nullptr, &action) != 0) continue;
    bool with_handler = (action.sa_flags & SA_SIGINFO) != 0;
    bool discarded = !with_handler && (action.sa_handler == SIG_IGN ||
                                       (action.sa_handler == SIG_DFL && ignored_by_default(sig)));
    if (discarded) sigdelset(&held, sig);
  }
  return held;
}

void block_all_signals() noexcept {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, nullptr);
}

}  // namespace tcp2rdma::preload
