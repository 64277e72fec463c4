// A listening socket's RDMA side: the rdma_cm listener beside it on the same address and port, where
// tcp2rdma clients ask for the RDMA connection of each TCP connection the listener accepted, and the
// wait for that request (docs/architecture.md, "The byte-exact switch").
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "deadline.h"
#include "options.h"
#include "rdma_stream.h"

namespace tcp2rdma::transport {
class StreamListener;
}

namespace tcp2rdma::preload {

class TrackedSocket;
class UpgradeSession;

// A listener a rule may select RDMA for: start an rdma_cm listener on the same address and port.
// Failure (no device, port taken) is logged unless `log_failure` is false; that listener's
// connections then stay TCP.
transport::Status listen_rdma(int fd, TrackedSocket* listener, bool log_failure = true);
// A process of a pre-fork server whose listener's port another process holds: an rdma_cm listener on
// the same address and a port of its own (recorded in own_rdma_port), where the holder sends this
// process's requests.
transport::Status listen_rdma_on_own_port(int fd, TrackedSocket* listener);
// A process with its own port taking over the listener's port (its holder exited): an rdma_cm
// listener there, in directory_listener.
transport::Status listen_rdma_for_directory(int fd, TrackedSocket* listener);

// Undoes listen_rdma when the real listen() then failed.
void drop_rdma_listener(TrackedSocket* listener);

// Whether the rules may send a connection accepted on fd over RDMA, judged by the address it is bound
// to; *bound says whether it has a port already (bind() was called: listen() will not pick one).
// Unbound, it may (its port is not known yet).
bool rdma_wanted_at(int fd, bool* bound);

class PublishedTuple;

// A server connection's wait for its client's RDMA request, one look at a time: the upgrade engine
// (upgrade/request_watch.h) holds thousands of them in one thread, where a thread each would wait for
// seconds. While it lives, a pre-fork server's directory says where the request is to be sent.
class RequestWait {
 public:
  RequestWait(TrackedSocket* listener, const transport::TcpTuple& tuple, const config::ConnectionOptions& options);
  ~RequestWait();
  RequestWait(const RequestWait&) = delete;
  RequestWait& operator=(const RequestWait&) = delete;

  // One look for this connection's request among those the listener holds (collect_arrivals takes
  // what arrived): kOk: answered into *out (its await_established() comes next, off the listener's
  // lock); kWouldBlock: not yet; anything else: no RDMA for this connection (kRejected: no RDMA
  // listener in this process). Not yet, the wait is measured again from the client's latest request
  // (StreamListener::last_heard): a client that keeps asking has its upgrades queued, this one
  // among them.
  transport::Status look(std::unique_ptr<transport::RdmaStream>* out);
  // The upgrade timeout has passed, since the accept or the client's latest request as last looked.
  bool expired(std::chrono::steady_clock::time_point now) const { return now >= until_; }
  // The wait is given up: a request that comes later is answered at once with a decline.
  void give_up();
  TrackedSocket* listener() const { return listener_; }
  const transport::TcpTuple& tuple() const { return tuple_; }
  // The listener is a pre-fork server's (its processes share a directory): the process that accepted
  // the connection may fork it away to another before it uses it (PostgreSQL's postmaster).
  bool in_family() const { return in_family_; }
  // When the wait began (the connection's accept).
  std::chrono::steady_clock::time_point began() const { return began_; }

 private:
  TrackedSocket* listener_;
  transport::TcpTuple tuple_;
  transport::StreamOptions options_;
  std::chrono::steady_clock::duration timeout_;
  std::chrono::steady_clock::time_point until_;
  std::unique_ptr<PublishedTuple> published_;
  bool in_family_ = false;
  std::chrono::steady_clock::time_point began_;
};

// Takes what arrived at `listener` (rdma_cm requests, opens on its links) without waiting. *fd: its
// descriptor, to poll for the next; with `admitted`, the tuples of the requests held since the last
// such call are appended to it, and *whole is false when some were not kept (look at every wait
// then); only the upgrade engine takes them. With `wake`, what *fd's readiness says (below).
// kRejected: no RDMA listener in this process (any more).
struct ListenerWake {
  bool every_open = true;   // readable for opens on links too (StreamListener::wakes_for_opens)
  bool links_left = false;  // some links' opens come only through an event loop's takes (leaves_links_to_loops)
};
transport::Status collect_arrivals(TrackedSocket* listener, int* fd, std::vector<transport::TcpTuple>* admitted,
                                   bool* whole, ListenerWake* wake = nullptr);

// Waits (up to the rule's upgrade_timeout) for the client's RDMA connection request for the accepted
// connection `tuple` and accepts it into *out. A tcp2rdma client sends it right after its TCP connect
// completes, but its first setup in a process can take over a second on a slow guest; a plain client
// never sends one (kWouldBlock once the wait is over, or the session was settled meanwhile). The
// listener is locked per look, not for the wait: other connections' upgrades go on. kRejected: this
// process has no RDMA listener for it.
transport::Status accept_request(TrackedSocket* listener, const transport::TcpTuple& tuple,
                                 const config::ConnectionOptions& options, const UpgradeSession* session,
                                 std::unique_ptr<transport::RdmaStream>* out);

// Whether the client of the accepted connection `tuple` has asked `listener` for another connection
// not accepted yet (what arrived is taken first): a client that upgrades its connections one at a
// time waits for that one's answer before it asks for `tuple`'s.
bool client_asks_elsewhere(TrackedSocket* listener, const transport::TcpTuple& tuple);

// A server connection that stays TCP: its client's RDMA request, held or still to come, is rejected at
// once instead of making the client wait out the hold (an event-loop client that upgrades its
// connections one by one would wait that long for each).
void decline(TrackedSocket* listener, const transport::TcpTuple& tuple, transport::DeclineReason why);
// Whether this process has an rdma_cm listener beside `listener` (one lock, no system call): a server
// connection that stays TCP has a request to decline only then.
bool serves_rdma(TrackedSocket* listener);
// Whether the listener surely has no RDMA listener here, without waiting for its lock (an accept that
// waits for its request may hold it for seconds): false when the lock is busy.
bool surely_without_rdma(TrackedSocket* listener);
// Why listen_rdma could not make the rdma_cm listener beside `listener` (kMemoryLock: a process that
// may register no memory at all makes none, transport/status.h), or kOk when it did or was not asked.
transport::Status why_no_rdma_listener(TrackedSocket* listener);

}  // namespace tcp2rdma::preload
