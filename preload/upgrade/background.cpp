#include "upgrade/background.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <new>

#include "listener/rdma_listener.h"
#include "readiness/epoll_sets.h"
#include "registry/connection_policy.h"
#include "registry/fd_table.h"
#include "registry/per_process.h"
#include "registry/upgrade_session.h"
#include "upgrade/request_watch.h"
#include "upgrade/upgrade_steps.h"
#include "upgrade/worker_pool.h"
#include "stats/stats_writer.h"
#include "util/log.h"

namespace tcp2rdma::preload {
namespace {

// Background upgrades run in two pools (docs/links.md, "The upgrade engine"): a client's from the
// start, a server's once its client's request has been answered (the wait before is the engine's,
// request_watch.h). Two pools, not one: a server's switch waits only for its client, who is already
// in a thread of its own process, while a client's waits for its server; with one pool, clients
// could fill two processes' pools waiting for servers neither has a thread left for.
constexpr int kPoolThreads = 16;
constexpr int kPoolLingerMs = 10000;  // an idle pool thread ends after this long

struct Pools {
  explicit Pools(unsigned made_in) : generation(made_in) {}
  const unsigned generation;
  WorkerPool clients{kPoolThreads, kPoolLingerMs};
  WorkerPool servers{kPoolThreads, kPoolLingerMs};
};
std::atomic<Pools*> g_pools{nullptr};

// A background upgrade that cannot go on in a thread of its own (none could be had): the connection
// stays TCP, saying why.
void stays_without_thread(const Connection& c, UpgradeSession* session) {
  if (session->returning()) c.socket->returns.failed(std::chrono::steady_clock::now());
  if (session->end_on_tcp()) {
    log_line("%s: stays tcp (cannot start a thread for the upgrade)", session->label());
    stats::slot_on_tcp(c.socket->stats_slot.load(std::memory_order_relaxed), stats::TcpReason::kResources,
                       "stays tcp (cannot start a thread for the upgrade)");
  }
  epoll_move_pending(c.fd, false);
}

// A server connection's background upgrade after its wait: the rest (the client's completion, the
// switch) in the server pool; on the engine's thread itself only if no pool thread can be had.
void finish_server(Pools* pools, const std::shared_ptr<Connection>& c, UpgradeSession* session,
                   const std::function<void()>& let_go, transport::Status s,
                   std::unique_ptr<transport::RdmaStream> answered) {
  std::function<void()> rest;
  try {
    auto answer = std::make_shared<Answer>(Answer{s, std::move(answered)});
    rest = [c, session, let_go, answer] {
      conclude(*c, session, run_upgrade(*c, session, answer.get()), true);
      let_go();
    };
  } catch (const std::bad_alloc&) {  // no exception leaves the engine's thread
    conclude(*c, session, UpgradeOutcome{false, true, "out of memory"}, true);
    let_go();
    return;
  }
  if (!pools->servers.submit(rest)) rest();
}

// When a wait for an upgrade on a live link last ran out (steady clock, ns; 0: never).
std::atomic<int64_t> g_linked_wait_missed{0};
constexpr auto kLinkedWaitRest = std::chrono::seconds(1);

// A client already linked to its server has its connection on RDMA within a few round trips (a
// channel opened on the link, then the switch): the application's call waits that long, bounded by
// the rule's linked_wait, so that a short connection's bytes go over RDMA instead of all over TCP
// before its switch (docs/links.md, "Short-lived connections"). A wait that runs out (a server slow
// to accept, or this very thread the one that would accept) leaves the upgrade to go on beside the
// application, and for a second no call of the process waits: a slow server costs an event loop one
// bounded wait a second, not one a connection.
void wait_if_linked(const Connection& c, UpgradeSession* session) {
  uint64_t most = c.decision.options->linked_wait_us;
  if (most == 0 || !c.have_tuple) return;
  int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
  int64_t missed = g_linked_wait_missed.load(std::memory_order_relaxed);
  if (missed != 0 && now - missed < std::chrono::nanoseconds(kLinkedWaitRest).count()) return;
  if (!transport::RdmaStream::linked_to(reinterpret_cast<const sockaddr*>(&c.server))) return;
  if (session->wait_over_for(std::chrono::microseconds(most))) return;
  g_linked_wait_missed.store(now, std::memory_order_relaxed);
  log_line("%s: not on rdma after the linked wait (%llu us); the upgrade goes on beside the application",
           session->label(), static_cast<unsigned long long>(most));
}

}  // namespace

// A client's upgrade runs in the client pool; a server's waits for its client's request in the
// engine's thread, then runs in the server pool.
bool upgrade_beside(int fd, config::Role role, TrackedSocket* listener, const config::Decision& decision,
                    SessionStart start) {
  SocketHold socket = SocketHold::of(fd);
  if (!socket) return false;
  UpgradeSession* session = start == SessionStart::kResumed  ? socket->restart_session()
                            : start == SessionStart::kReturn ? socket->start_return_session()
                                                             : socket->start_session();
  if (session == nullptr) return false;
  // The listener is held by the upgrade (below) for as long as the session can be deferred (a return
  // is not: a fork settles it, and the connection, shared from then on, stays TCP).
  if (role == config::Role::kServer && listener != nullptr && start != SessionStart::kReturn) {
    session->set_origin(listener, decision);
  }
  char label[kConnectionLabelSize];
  describe_connection(fd, role, decision, label, sizeof label);
  session->set_label(label);
  std::shared_ptr<Connection> c;
  std::function<void()> let_go, whole;
  Pools* pools = this_process_instance(g_pools);
  try {
    if (pools == nullptr) throw std::bad_alloc();
    c = std::make_shared<Connection>(describe(fd, role, socket.get(), listener, decision));
    let_go = [c] {
      c->socket->release();
      if (c->listener != nullptr) c->listener->release();
    };
    whole = [c, session, let_go] {
      conclude(*c, session, run_upgrade(*c, session), true);
      let_go();
    };
  } catch (const std::bad_alloc&) {  // no exception leaves the application's call
    if (session->returning()) socket->returns.failed(std::chrono::steady_clock::now());
    if (session->end_on_tcp()) log_line("%s: stays tcp (out of memory)", label);
    epoll_move_pending(fd, false);
    return true;
  }
  // Its second request is told from a repeat of its first by the number of upgrades before it.
  if (c->have_tuple) c->tuple.reserved = socket->upgrades();
  if (std::optional<UpgradeOutcome> known = without_request(*c)) {
    // No request can come (the listener has no RDMA listener here): concluded in the application's
    // call, no thread woken, so that a server whose switches all fail so costs what it costs without
    // the module.
    conclude(*c, session, *known, true);
    return true;
  }
  socket->add_ref();  // the upgrade's, until it is done with the socket and its listener (let_go)
  if (listener != nullptr) listener->add_ref();
  if (c->is_client || !c->have_tuple || listener == nullptr) {
    // A server connection that cannot have a request concludes in the pool too (quickly).
    if (!(c->is_client ? pools->clients : pools->servers).submit(whole)) {
      stays_without_thread(*c, session);
      let_go();
      return true;
    }
    // A return never holds the application's call: the connection is carrying its bytes on TCP.
    if (c->is_client && start != SessionStart::kReturn) wait_if_linked(*c, session);
    return true;
  }
  RequestWaiter waiter;
  try {
    waiter.wait = std::make_unique<RequestWait>(listener, c->tuple, *decision.options);
    waiter.session = session;
    waiter.done = [pools, c, session, let_go](transport::Status s, std::unique_ptr<transport::RdmaStream> answered) {
      finish_server(pools, c, session, let_go, s, std::move(answered));
    };
  } catch (const std::bad_alloc&) {
    waiter.wait.reset();
  }
  if (waiter.wait == nullptr || !watch_request(waiter)) {
    stays_without_thread(*c, session);
    let_go();
  }
  return true;
}

}  // namespace tcp2rdma::preload
