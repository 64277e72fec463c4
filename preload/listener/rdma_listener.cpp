#include "listener/rdma_listener.h"

#include <netinet/in.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <mutex>

#include "libc/real_calls.h"
#include "listener/listener_directory.h"
#include "listener/listener_state.h"
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

// An rdma_cm listener for `listener` at its address: on its port (kOnListenersPort, kDirectory) or on
// one rdma_cm picks (kOnOwnPort).
transport::Status make_rdma_listener(int fd, TrackedSocket* socket, ListenerKind kind, bool log_failure) {
  ListenerState* listener = make_listener_state(socket);
  if (listener == nullptr) return transport::Status::kResources;
  bool own_port = kind == ListenerKind::kOnOwnPort;
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  if (real().getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) return transport::Status::kInvalid;
  if (own_port && local.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(&local)->sin6_port = 0;
  if (own_port && local.ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(&local)->sin_port = 0;
  std::unique_ptr<transport::StreamListener> rdma;
  // Options of the listener's own streams come from the rule that matches each accepted connection;
  // the defaults here only size what a request is checked against.
  transport::Status s =
      transport::StreamListener::listen(reinterpret_cast<sockaddr*>(&local), transport::StreamOptions{}, &rdma);
  std::lock_guard lock(listener->mutex);
  if (s != transport::Status::kOk) {
    if (log_failure) log_line("fd %d listener: no RDMA listener on its port (%s): its connections stay tcp", fd, why_not(s));
    return s;
  }
  if (kind == ListenerKind::kDirectory) {
    listener->directory_listener = std::move(rdma);
    return s;
  }
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

bool has_bound_port(int fd) {
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  if (real().getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) return false;
  if (local.ss_family == AF_INET) return reinterpret_cast<sockaddr_in*>(&local)->sin_port != 0;
  if (local.ss_family == AF_INET6) return reinterpret_cast<sockaddr_in6*>(&local)->sin6_port != 0;
  return false;
}

namespace {

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

}  // namespace

// A server connection that stays TCP: its client's RDMA request, held or still to come, is rejected at
// once instead of making the client wait out the hold (an event-loop client that upgrades its
// connections one by one would wait that long for each).
void decline(TrackedSocket* socket, const transport::TcpTuple& tuple) {
  ListenerState* listener = listener_state(socket);
  if (listener == nullptr) return;
  std::lock_guard lock(listener->mutex);
  transport::StreamListener* rdma = listener->rdma_listener.get();
  if (rdma != nullptr && listener->listener_generation == fork_generation()) rdma->decline(tuple);
}

transport::Status accept_request(TrackedSocket* socket, const transport::TcpTuple& tuple,
                                 const config::ConnectionOptions& options, const UpgradeSession* session,
                                 std::unique_ptr<transport::RdmaStream>* out) {
  ListenerState* listener = listener_state(socket);
  if (listener == nullptr) return transport::Status::kRejected;
  auto until = Deadline::in(std::chrono::microseconds(options.upgrade_timeout_us));
  PublishedTuple published(listener, tuple);
  for (;;) {
    int listener_fd = -1;
    transport::Status s = transport::Status::kWouldBlock;
    std::unique_ptr<transport::RdmaStream> answered;
    {
      std::lock_guard lock(listener->mutex);
      transport::StreamListener* rdma = listener->rdma_listener.get();
      if (rdma == nullptr || listener->listener_generation != fork_generation()) return transport::Status::kRejected;
      rdma->collect(kRequestHold);
      s = rdma->begin_accept(tuple, transport::random_nonce(), stream_options(options), &answered);
      listener_fd = rdma->fd();
    }
    if (s == transport::Status::kOk) {
      // The client's completion is awaited without the listener's lock: one that never completes
      // stalls no other connection's upgrade.
      s = answered->await_established();
      if (s == transport::Status::kOk) *out = std::move(answered);
      return s;
    }
    if (s != transport::Status::kWouldBlock) return s;
    if (until.passed() || session->phase() == UpgradeSession::Phase::kOver) {
      decline(socket, tuple);  // a request that comes later is answered at once
      return transport::Status::kWouldBlock;
    }
    pollfd p{listener_fd, POLLIN, 0};
    real().poll(&p, 1, 20);
  }
}

}  // namespace tcp2rdma::preload
