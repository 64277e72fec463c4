// The preload module's load and exit hooks: says the module is there when logging is on, takes the
// prefixes and returns an exec'ing process handed on, and when the process ends (exit, and _exit or
// _Exit where it is safe) closes its RDMA streams in order.
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "device_context.h"
#include "libc/interposed.h"
#include "process/exec_guard.h"
#include "process/exec_returns.h"
#include "process/fork_service.h"
#include "registry/tracked_socket.h"
#include "stats/stats_writer.h"
#include "util/log.h"

using tcp2rdma::preload::real;

namespace {

// Runs in every process the module is preloaded into, before main().
[[gnu::constructor]] void announce_load() {
  if (tcp2rdma::preload::log_enabled()) tcp2rdma::preload::log_line("loaded");
  tcp2rdma::preload::adopt_exec_prefixes();
  tcp2rdma::preload::adopt_exec_returns();  // after the prefixes: a connection may have both
}

// The process ends: its connections end as the kernel ends a TCP socket's when its last holder goes,
// whatever way the process left. Bytes written are delivered, then the end (a reset where the kernel
// resets: unread bytes, SO_LINGER 0); connections lent to children go on there. The stats segment
// goes with the process (one that ends by a signal leaves it: the readers tell it is stale,
// docs/stats.md).
void leave_connections() {
  tcp2rdma::preload::answer_children_before_leaving();  // connections lent to children go on there
  tcp2rdma::preload::close_streams_at_exit();
  tcp2rdma::stats::remove_segment();
}

[[gnu::destructor]] void flush_at_exit() { leave_connections(); }

// _exit and _Exit skip exit()'s handlers, yet the kernel delivers a TCP socket's bytes and its end
// after them as after exit(): a forked worker that writes its answer and ends with _exit (Python's
// os._exit, redis's BGSAVE child, a CGI-style child) must not leave its peer a reset. The same
// leaving runs, but not where it could hang or touch what is not this process's:
// - in a signal handler (as far as can be told: any signal blocked in this thread, which a handler's
//   own signal is), whose interrupted code may hold a lock of ours or of malloc's; a thread that
//   blocks signals for good ends as before, its peers reading a reset;
// - in a process that put no connection on RDMA itself (no device context of its own): a child of
//   fork() that ends with _exit before or instead of exec (a failed exec) ends at once, as it must in
//   a threaded parent's child, where only async-signal-safe calls are allowed; so does a process that
//   shares this memory without being the one that made its connections (clone with CLONE_VM).
void leave_connections_if_safe() {
  if (!tcp2rdma::transport::opened_contexts_here()) return;
  sigset_t blocked;
  if (pthread_sigmask(SIG_BLOCK, nullptr, &blocked) != 0 || !sigisemptyset(&blocked)) return;
  leave_connections();
}

[[noreturn]] void end_process(void (*real_exit)(int), int status) {
  if (real_exit != nullptr) real_exit(status);
  syscall(SYS_exit_group, status);
  __builtin_unreachable();
}

}  // namespace

T2R_INTERPOSE void _exit(int status) {
  leave_connections_if_safe();
  end_process(real()._exit, status);
}

T2R_INTERPOSE void _Exit(int status) noexcept {
  leave_connections_if_safe();
  end_process(real()._Exit, status);
}
