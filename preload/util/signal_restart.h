// Signals and blocking calls. The kernel restarts a blocking socket call that a signal handler
// interrupted when the handler was installed with SA_RESTART, and fails it with EINTR when it was
// not (sockperf's timer, for one, relies on the EINTR to end its test). The module's own sleeps
// (epoll_wait, poll) are never restarted by the kernel, and nothing tells them which signal ran.
#pragma once

namespace tcp2rdma::preload {

// Whether an application's blocking call whose sleep a signal handler interrupted fails with EINTR
// (true) or goes on (false): EINTR when any caught signal's handler lacks SA_RESTART, since a program
// with such a handler must expect EINTR from its calls; going on when every handler has it. Fault
// signals (SIGSEGV, SIGBUS, ...) do not count: they never interrupt a sleep. The handlers are read at
// the moment of the interruption (a few dozen sigaction calls, only then).
bool interrupted_call_fails() noexcept;

}  // namespace tcp2rdma::preload
