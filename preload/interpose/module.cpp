// The preload module's load and exit hooks: says the module is there when logging is on, takes the
// prefixes and returns an exec'ing process handed on, and at exit closes the process's RDMA streams
// in order.
#include "process/exec_guard.h"
#include "process/exec_returns.h"
#include "process/fork_service.h"
#include "registry/tracked_socket.h"
#include "stats/stats_writer.h"
#include "util/log.h"

namespace {

// Runs in every process the module is preloaded into, before main().
[[gnu::constructor]] void announce_load() {
  if (tcp2rdma::preload::log_enabled()) tcp2rdma::preload::log_line("loaded");
  tcp2rdma::preload::adopt_exec_prefixes();
  tcp2rdma::preload::adopt_exec_returns();  // after the prefixes: a connection may have both
}

// Runs at exit() (not at _exit): bytes written to upgraded connections still reach the peer.
// The stats segment goes with the process (a process that ends by _exit or a signal leaves it: the
// readers tell it is stale, docs/stats.md).
[[gnu::destructor]] void flush_at_exit() {
  tcp2rdma::preload::answer_children_before_leaving();  // connections lent to children go on there
  tcp2rdma::preload::close_streams_at_exit();
  tcp2rdma::stats::remove_segment();
}

}  // namespace
