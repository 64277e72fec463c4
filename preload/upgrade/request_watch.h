// The upgrade engine's thread (docs/links.md, "The upgrade engine"): every server connection of the
// process that waits for its client's RDMA request waits here, in one thread, instead of in a thread
// of its own. A wait ends when the request is answered, the upgrade timeout passes, the connection is
// settled (closed, fork, exec) or the listener has no RDMA listener any more; then the connection's
// `done` runs, on this thread: it must not block (it queues the rest of the upgrade to a pool).
#pragma once

#include <functional>
#include <memory>

#include "listener/rdma_listener.h"
#include "registry/upgrade_session.h"
#include "rdma_stream.h"

namespace tcp2rdma::preload {

struct RequestWaiter {
  std::unique_ptr<RequestWait> wait;
  // The connection's session: settled meanwhile (closed, fork, exec), it wants its request no more.
  const UpgradeSession* session = nullptr;
  // kOk with the answered stream (not yet established), or why there is none (kWouldBlock: no request
  // came in time, or it is no longer wanted).
  std::function<void(transport::Status, std::unique_ptr<transport::RdmaStream>)> done;
  // The engine's (Waits::set_held): a look found the connection not yet used by this process, and
  // left its request held (looked at again once it may be answered: request_watch.cpp, answerable).
  bool held_for_use = false;
};

// Hands `waiter` to the engine's thread. False when there is no such thread and none can be started
// (the waiter is then untouched: the caller decides).
bool watch_request(RequestWaiter& waiter) noexcept;

}  // namespace tcp2rdma::preload
