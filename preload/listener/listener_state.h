// What only a listening socket has: its rdma_cm listeners and, for pre-fork servers, the family's
// directory (docs/architecture.md, "Pre-fork servers"). The socket owns it (TrackedSocket::
// listener_parts, made at the first listen() a rule may select RDMA for) and ends it with its last
// descriptor; only the listener code knows what it holds.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>

#include "registry/tracked_socket.h"
#include "status.h"

namespace tcp2rdma::transport {
class StreamListener;
}

namespace tcp2rdma::preload {

class ListenerDirectory;
struct DirectoryService;

struct ListenerState final : ListenerParts {
  // Stops this process's directory thread and lets go of the directory; the rdma_cm listeners of an
  // ancestor (a forked child's copies) are left alone: destroying them would end the ancestor's.
  ~ListenerState() override;

  // The rdma_cm listener on the same address and port, and the lock that serialises accepts
  // through it; the fork_generation() of the process that made it.
  std::mutex mutex;
  std::unique_ptr<transport::StreamListener> rdma_listener;
  unsigned listener_generation = 0;
  // Why the last try to make rdma_listener failed (kOk: it did not, or nobody tried): its connections'
  // log lines and stats slots say so (with mutex).
  transport::Status rdma_failure = transport::Status::kOk;
  // A client's RDMA request that no accepted connection claims is rejected after this long (set with
  // the rdma_cm listener, with mutex): the longest upgrade timeout of the rules that may select the
  // listener's connections for RDMA, and at least 5 s. As long as a server connection waits for its
  // client's request, a request waits for its server's application to accept the connection: under a
  // burst the application's accept() may come many seconds after the client's connect() returned and
  // its request left (integration.many_connections.pair: 18 of 1000 requests expired after a fixed
  // 5 s hold, and their connections, accepted later, waited the upgrade timeout for a request that had
  // come and gone), and an inetd service takes its connection's upgrade up only once it has been
  // forked and exec'd (integration.inetd_load.pair, whose rules say 20 s: its services began 8 s
  // after the request on a loaded testbed).
  std::chrono::milliseconds request_hold{5000};
  // Pre-fork servers (prefork_listeners.cpp): the fork_generation() of the last process that accepted
  // on this listener; whether an ancestor handed the RDMA listener on to whichever process of the
  // family accepts; whether this fork drops it in the parent; the process that last tried to make it
  // again (with mutex).
  std::atomic<unsigned> accept_generation{~0u};
  std::atomic<bool> rdma_handed_on{false};
  std::atomic<bool> drop_after_fork{false};
  unsigned claim_generation = ~0u;
  // Pre-fork servers whose several processes accept (listener_directory.h): the family's directory,
  // made before the first fork; the port of this process's own rdma_cm listener when another process
  // holds the listener's port (0: rdma_listener is on the listener's port; with mutex); the holder's
  // thread that sends the others' requests on (directory_service.h), and the process that runs it
  // (fork_generation()).
  std::atomic<ListenerDirectory*> directory{nullptr};
  // The memfd the directory is mapped from (ListenerDirectory::create), or -1: a new program this
  // process execs with one of the listener's connections maps it too (process/exec_returns.h). Set
  // with the directory; closed with it.
  std::atomic<int> directory_memfd{-1};
  uint16_t own_rdma_port = 0;
  // In a process with its own port that took the listener's port over after the process holding it
  // exited: the rdma_cm listener there, which only sends requests on (with mutex).
  std::unique_ptr<transport::StreamListener> directory_listener;
  DirectoryService* directory_service = nullptr;
  unsigned service_generation = ~0u;
};

// The listener state of `socket`, or null when it has none (it never listened with a rule that may
// select RDMA, or there was no memory for it).
ListenerState* listener_state(const TrackedSocket* socket) noexcept;
// The same, made if it is missing; null only without memory.
ListenerState* make_listener_state(TrackedSocket* socket) noexcept;

}  // namespace tcp2rdma::preload
