#include "listener/rdma_listener.h"

#include <netinet/in.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <mutex>

#include "libc/real_calls.h"
#include "listener/listener_directory.h"
#include "listener/listener_state.h"
#include "rdma_address.h"
#include "rdma_stream.h"
#include "registry/connection_policy.h"
#include "registry/tracked_socket.h"
#include "registry/upgrade_session.h"
#include "stream_listener.h"
#include "util/log.h"

namespace tcp2rdma::preload {
namespace {

using transport::Deadline;

enum class ListenerKind { kOnListenersPort, kOnOwnPort, kDirectory };

// The socket's IPV6_V6ONLY (false for an IPv4 socket, or when it cannot be read: the kernel's
// default on Linux).
bool ipv6_only(int fd, const sockaddr_storage& local) {
  int only = 0;
  socklen_t len = sizeof only;
  return local.ss_family == AF_INET6 && real().getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &only, &len) == 0 && only != 0;
}

// Says where the RDMA listener of a dual-stack socket listens, when that is not plain from its address:
// an IPv4-mapped address (at the IPv4 one), the IPv6 wildcard (for one family or both).
void log_dual_stack(int fd, const sockaddr_storage& local, bool v6_only) {
  const sockaddr* address = reinterpret_cast<const sockaddr*>(&local);
  char socket_side[64], rdma_side[64];
  format_endpoint(local, true, socket_side, sizeof socket_side);
  if (transport::is_ipv4_mapped(address)) {
    format_endpoint(transport::rdma_address(address), true, rdma_side, sizeof rdma_side);
    log_line("fd %d listener: RDMA listener at %s (the socket's %s is IPv4-mapped)", fd, rdma_side, socket_side);
  } else if (local.ss_family == AF_INET6 &&
             IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6*>(&local)->sin6_addr)) {
    log_line("fd %d listener: RDMA listener at %s for %s", fd, socket_side,
             v6_only ? "IPv6 only (IPV6_V6ONLY)" : "IPv6 and IPv4 (dual-stack)");
  }
}

// An rdma_cm listener for `listener` at its address: on its port (kOnListenersPort, kDirectory) or on
// one rdma_cm picks (kOnOwnPort).
transport::Status make_rdma_listener(int fd, TrackedSocket* socket, ListenerKind kind, bool log_failure) {
  ListenerState* listener = make_listener_state(socket);
  if (listener == nullptr) return transport::Status::kResources;
  bool own_port = kind == ListenerKind::kOnOwnPort;
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  if (real().getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) return transport::Status::kInvalid;
  auto longest = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::microseconds(
      process_rules().longest_upgrade_timeout_at(reinterpret_cast<const sockaddr*>(&local))));
  if (own_port && local.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(&local)->sin6_port = 0;
  if (own_port && local.ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(&local)->sin_port = 0;
  std::unique_ptr<transport::StreamListener> rdma;
  bool v6_only = ipv6_only(fd, local);
  // Options of the listener's own streams come from the rule that matches each accepted connection;
  // the defaults here only size what a request is checked against.
  transport::Status s = transport::StreamListener::listen(reinterpret_cast<sockaddr*>(&local),
                                                          transport::StreamOptions{}, &rdma, v6_only);
  std::lock_guard lock(listener->mutex);
  listener->request_hold = std::max(std::chrono::milliseconds(5000), longest);
  if (kind == ListenerKind::kOnListenersPort) listener->rdma_failure = s;
  if (s != transport::Status::kOk) {
    if (log_failure) log_line("fd %d listener: no RDMA listener on its port (%s): its connections stay tcp", fd, why_not(s));
    return s;
  }
  if (kind == ListenerKind::kDirectory) {
    listener->directory_listener = std::move(rdma);
    return s;
  }
  if (log_failure) log_dual_stack(fd, local, v6_only);
  listener->own_rdma_port = own_port ? rdma->port() : 0;
  listener->rdma_listener = std::move(rdma);
  listener->listener_generation = fork_generation();
  return s;
}

}  // namespace

transport::Status listen_rdma(int fd, TrackedSocket* listener, bool log_failure) {
  return make_rdma_listener(fd, listener, ListenerKind::kOnListenersPort, log_failure);
}

transport::Status listen_rdma_on_own_port(int fd, TrackedSocket* listener) {
  return make_rdma_listener(fd, listener, ListenerKind::kOnOwnPort, true);
}

transport::Status listen_rdma_for_directory(int fd, TrackedSocket* listener) {
  return make_rdma_listener(fd, listener, ListenerKind::kDirectory, false);
}

void drop_rdma_listener(TrackedSocket* socket) {
  ListenerState* listener = listener_state(socket);
  if (listener == nullptr) return;
  std::lock_guard lock(listener->mutex);
  listener->rdma_listener.reset();
}

bool rdma_wanted_at(int fd, bool* bound) {
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  *bound = false;
  if (real().getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) return true;
  if (local.ss_family == AF_INET) *bound = reinterpret_cast<sockaddr_in*>(&local)->sin_port != 0;
  if (local.ss_family == AF_INET6) *bound = reinterpret_cast<sockaddr_in6*>(&local)->sin6_port != 0;
  return !*bound || process_rules().may_select_rdma_at(reinterpret_cast<const sockaddr*>(&local));
}

// In a process of a pre-fork server that listens on a port of its own (another process holds the
// listener's port): while the connection's request is awaited, the directory says where the holder
// is to send it.
class PublishedTuple {
 public:
  PublishedTuple(ListenerState* listener, const transport::TcpTuple& tuple) : tuple_(tuple) {
    uint16_t port = 0;
    {
      std::lock_guard lock(listener->mutex);
      if (listener->listener_generation == fork_generation()) port = listener->own_rdma_port;
    }
    ListenerDirectory* directory = listener->directory.load();
    if (port == 0 || directory == nullptr) return;
    self_ = getpid();
    if (directory->publish(tuple, port, self_)) {
      directory_ = directory;
    } else {
      log_line("listener: the pre-fork directory is full: a connection's RDMA request cannot reach this process");
    }
  }
  ~PublishedTuple() {
    if (directory_ != nullptr) directory_->withdraw(tuple_, self_);
  }
  PublishedTuple(const PublishedTuple&) = delete;
  PublishedTuple& operator=(const PublishedTuple&) = delete;

 private:
  transport::TcpTuple tuple_;
  ListenerDirectory* directory_ = nullptr;
  pid_t self_ = 0;
};

// A server connection that stays TCP: its client's RDMA request, held or still to come, is rejected at
// once instead of making the client wait out the hold (an event-loop client that upgrades its
// connections one by one would wait that long for each).
void decline(TrackedSocket* socket, const transport::TcpTuple& tuple, transport::DeclineReason why) {
  ListenerState* listener = listener_state(socket);
  if (listener == nullptr) return;
  std::lock_guard lock(listener->mutex);
  transport::StreamListener* rdma = listener->rdma_listener.get();
  if (rdma != nullptr && listener->listener_generation == fork_generation()) rdma->decline(tuple, why);
}

transport::Status why_no_rdma_listener(TrackedSocket* socket) {
  ListenerState* listener = listener_state(socket);
  if (listener == nullptr) return transport::Status::kOk;
  std::lock_guard lock(listener->mutex);
  return listener->rdma_failure;
}

bool serves_rdma(TrackedSocket* socket) {
  ListenerState* listener = listener_state(socket);
  if (listener == nullptr) return false;
  std::lock_guard lock(listener->mutex);
  return listener->rdma_listener != nullptr && listener->listener_generation == fork_generation();
}

bool surely_without_rdma(TrackedSocket* socket) {
  ListenerState* listener = listener_state(socket);
  if (listener == nullptr) return true;
  std::unique_lock lock(listener->mutex, std::try_to_lock);
  return lock.owns_lock() && (listener->rdma_listener == nullptr || listener->listener_generation != fork_generation());
}

RequestWait::RequestWait(TrackedSocket* listener, const transport::TcpTuple& tuple,
                         const config::ConnectionOptions& options)
    : listener_(listener),
      tuple_(tuple),
      options_(stream_options(options)),
      timeout_(std::chrono::microseconds(options.upgrade_timeout_us)),
      until_(Deadline::in(timeout_).at()),
      began_(std::chrono::steady_clock::now()) {
  if (ListenerState* state = listener_state(listener)) {
    published_ = std::make_unique<PublishedTuple>(state, tuple);
    in_family_ = state->directory.load() != nullptr;
  }
}

RequestWait::~RequestWait() = default;

namespace {

// The listener's RDMA side, locked, or null when this process has none (any more).
transport::StreamListener* locked_rdma(ListenerState* listener) {
  if (listener == nullptr) return nullptr;
  transport::StreamListener* rdma = listener->rdma_listener.get();
  return rdma != nullptr && listener->listener_generation == fork_generation() ? rdma : nullptr;
}

}  // namespace

transport::Status RequestWait::look(std::unique_ptr<transport::RdmaStream>* out) {
  ListenerState* listener = listener_state(listener_);
  if (listener == nullptr) return transport::Status::kRejected;
  std::lock_guard lock(listener->mutex);
  transport::StreamListener* rdma = locked_rdma(listener);
  if (rdma == nullptr) return transport::Status::kRejected;
  transport::Status s = rdma->begin_accept(tuple_, options_, out);
  if (s == transport::Status::kWouldBlock) {
    auto heard = rdma->last_heard(tuple_);
    if (heard.time_since_epoch().count() != 0) until_ = std::max(until_, heard + timeout_);
  }
  return s;
}

transport::Status collect_arrivals(TrackedSocket* socket, int* fd, std::vector<transport::TcpTuple>* admitted,
                                   bool* whole, ListenerWake* wake) {
  ListenerState* listener = listener_state(socket);
  if (listener == nullptr) return transport::Status::kRejected;
  std::lock_guard lock(listener->mutex);
  transport::StreamListener* rdma = locked_rdma(listener);
  if (rdma == nullptr) return transport::Status::kRejected;
  rdma->collect(listener->request_hold);
  *fd = rdma->fd();
  if (wake != nullptr) *wake = ListenerWake{rdma->wakes_for_opens(), rdma->leaves_links_to_loops()};
  if (admitted != nullptr) *whole = rdma->take_admitted(admitted);
  return transport::Status::kOk;
}

bool client_asks_elsewhere(TrackedSocket* socket, const transport::TcpTuple& tuple) {
  ListenerState* listener = listener_state(socket);
  if (listener == nullptr) return false;
  std::lock_guard lock(listener->mutex);
  transport::StreamListener* rdma = locked_rdma(listener);
  if (rdma == nullptr) return false;
  rdma->collect(listener->request_hold);
  return rdma->holds_other_from(tuple);
}

void RequestWait::give_up() { decline(listener_, tuple_, transport::DeclineReason::kTooLate); }

transport::Status accept_request(TrackedSocket* socket, const transport::TcpTuple& tuple,
                                 const config::ConnectionOptions& options, const UpgradeSession* session,
                                 std::unique_ptr<transport::RdmaStream>* out) {
  RequestWait wait(socket, tuple, options);
  for (;;) {
    int listener_fd = -1;
    bool whole = true;
    ListenerWake wake;
    std::unique_ptr<transport::RdmaStream> answered;
    // The tuples held are left to the engine, which looks up its own waits by them: this wait looks
    // every round.
    transport::Status s = collect_arrivals(socket, &listener_fd, nullptr, &whole, &wake);
    if (s == transport::Status::kOk) s = wait.look(&answered);
    if (s == transport::Status::kOk) {
      // The client's completion is awaited without the listener's lock: one that never completes
      // stalls no other connection's upgrade.
      s = answered->await_established();
      if (s == transport::Status::kOk) *out = std::move(answered);
      return s;
    }
    if (s != transport::Status::kWouldBlock) return s;
    if (wait.expired(std::chrono::steady_clock::now()) || session->phase() == UpgradeSession::Phase::kOver) {
      wait.give_up();  // a later request is answered at once
      return transport::Status::kWouldBlock;
    }
    // Every 20 ms at most; every 2 ms while some link's opens come only through an event loop's
    // takes, since this thread, waiting in the application's accept, may be that loop.
    pollfd p{listener_fd, POLLIN, 0};
    real().poll(&p, 1, wake.links_left ? 2 : 20);
  }
}

}  // namespace tcp2rdma::preload
