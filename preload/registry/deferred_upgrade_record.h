// The record of a server connection's upgrade that a fork interrupted (process/deferred_upgrade.h):
// what the process that uses the connection next needs to take the upgrade up. The socket owns it
// (TrackedSocket::defer_upgrade).
#pragma once

#include <chrono>

#include "rule_set.h"

namespace tcp2rdma::preload {

class TrackedSocket;

struct DeferredUpgrade {
  // The listener that accepted the connection, held (one reference) by the record.
  TrackedSocket* listener = nullptr;
  config::Decision decision{};
  // The fork_generation() of the process that forked (the parent: the one that may take it up
  // without asking).
  unsigned generation = 0;
  // The latest fork that lent it (the parent's own take-up waits from there), under the take-up lock.
  mutable std::chrono::steady_clock::time_point lent_at{};
  // Handed to this program by the process that exec'd it (process/exec_returns.h): taken up as a
  // forked child takes up the one its parent gave it, through `listener`, which has only the
  // family's directory.
  bool handed_at_exec = false;
  // This process handed it on at an exec that failed (a shell tries each PATH directory): it is
  // handed on again at the next one, without another log line.
  bool handed_on = false;
};

}  // namespace tcp2rdma::preload
