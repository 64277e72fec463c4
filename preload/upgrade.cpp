#include "upgrade.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "connection_policy.h"
#include "fd_table.h"
#include "handover.h"
#include "log.h"
#include "real_calls.h"
#include "stream_listener.h"

namespace tcp2rdma::preload {
namespace {

using Clock = std::chrono::steady_clock;

// A request nobody claims is rejected after this long.
constexpr std::chrono::milliseconds kHold{5000};
// The records on TCP: both peers are tcp2rdma by then, so they come at once or not at all.
constexpr int kRecordTimeoutMs = 3000;

// An IPv4 peer of a dual-stack IPv6 socket appears as ::ffff:a.b.c.d: both ends must name it alike.
void put_address(const sockaddr_storage& s, uint8_t* addr, uint16_t* port, uint8_t* family) {
  if (s.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&s);
    std::memcpy(addr, &v4->sin_addr, 4);
    *port = ntohs(v4->sin_port);
    *family = AF_INET;
    return;
  }
  const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&s);
  *port = ntohs(v6->sin6_port);
  if (IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr)) {
    std::memcpy(addr, v6->sin6_addr.s6_addr + 12, 4);
    *family = AF_INET;
  } else {
    std::memcpy(addr, &v6->sin6_addr, 16);
    *family = AF_INET6;
  }
}

// The TCP 4-tuple as the client sees it, and the server's address (where its rdma_cm listens).
bool tuple_of(int fd, bool is_client, transport::TcpTuple* tuple, sockaddr_storage* server) {
  sockaddr_storage local{}, remote{};
  socklen_t local_len = sizeof local, remote_len = sizeof remote;
  if (real().getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
      real().getpeername(fd, reinterpret_cast<sockaddr*>(&remote), &remote_len) != 0) {
    return false;
  }
  const sockaddr_storage& client = is_client ? local : remote;
  *server = is_client ? remote : local;
  *tuple = transport::TcpTuple{};
  uint8_t client_family = 0, server_family = 0;
  uint16_t client_port = 0, server_port = 0;
  put_address(client, tuple->client_addr, &client_port, &client_family);
  put_address(*server, tuple->server_addr, &server_port, &server_family);
  tuple->client_port = client_port;
  tuple->server_port = server_port;
  tuple->family = server_family;
  if (tuple->family == AF_INET && server->ss_family == AF_INET6) {
    // Connect to the IPv4 address rdma_cm can route, not its mapped form.
    sockaddr_in v4{};
    v4.sin_family = AF_INET;
    v4.sin_port = htons(tuple->server_port);
    std::memcpy(&v4.sin_addr, tuple->server_addr, 4);
    std::memset(server, 0, sizeof *server);
    std::memcpy(server, &v4, sizeof v4);
  }
  return client_family == tuple->family;
}

NoncePair nonces_of(const transport::RdmaStream& stream) {
  NoncePair n;  // the transport's 64-bit nonces fill the first 8 bytes of the record's 16
  uint64_t c = stream.client_nonce(), s = stream.server_nonce();
  std::memcpy(n.client.data(), &c, sizeof c);
  std::memcpy(n.server.data(), &s, sizeof s);
  return n;
}

// Exactly n bytes to or from the TCP socket within the deadline, whatever its O_NONBLOCK.
bool tcp_exchange(int fd, uint8_t* buf, size_t n, bool sending, Clock::time_point deadline) {
  size_t done = 0;
  while (done < n) {
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    if (left <= 0) return false;
    pollfd p{fd, static_cast<short>(sending ? POLLOUT : POLLIN), 0};
    if (real().poll(&p, 1, left) <= 0) continue;
    ssize_t r = sending ? real().send(fd, buf + done, n - done, MSG_DONTWAIT | MSG_NOSIGNAL)
                        : real().recv(fd, buf + done, n - done, MSG_DONTWAIT);
    if (r == 0 && !sending) return false;
    if (r < 0 && errno != EAGAIN && errno != EINTR) return false;
    if (r > 0) done += static_cast<size_t>(r);
  }
  return true;
}

bool send_record(int fd, const transport::RdmaStream& stream, Clock::time_point deadline) {
  auto record = encode_record(nonces_of(stream));
  return tcp_exchange(fd, record.data(), record.size(), true, deadline);
}

bool receive_record(int fd, const transport::RdmaStream& stream, Clock::time_point deadline) {
  std::array<uint8_t, kRecordSize> record{};
  if (!tcp_exchange(fd, record.data(), record.size(), false, deadline)) return false;
  std::optional<NoncePair> got = decode_record(record);
  return got.has_value() && *got == nonces_of(stream);
}

// Both ends are tcp2rdma: each writes its record on TCP (the client first) and checks the other's;
// then the stream carries the application's bytes. A record that does not match is never guessed at.
UpgradeOutcome adopt_stream(int fd, TrackedSocket* socket, std::unique_ptr<transport::RdmaStream> stream,
                            bool is_client) {
  auto deadline = Clock::now() + std::chrono::milliseconds(kRecordTimeoutMs);
  bool proven = is_client ? send_record(fd, *stream, deadline) && receive_record(fd, *stream, deadline)
                          : receive_record(fd, *stream, deadline) && send_record(fd, *stream, deadline);
  if (!proven) {
    stream->abort();
    return {false, false, "the peer's handover record did not match this connection"};
  }
  int fl = real().fcntl(fd, F_GETFL);
  socket->nonblocking.store(fl >= 0 && (fl & O_NONBLOCK), std::memory_order_relaxed);
  socket->set_stream(std::move(stream));
  return {true, true, ""};
}

const char* why_not(transport::Status s) {
  switch (s) {
    case transport::Status::kRejected: return "the peer has no tcp2rdma listener (rejected)";
    case transport::Status::kNoDevice: return "no RDMA device";
    case transport::Status::kAddressInUse: return "another process holds the RDMA port";
    case transport::Status::kNoRoute: return "no RDMA route to the peer";
    case transport::Status::kMemoryLock: return "cannot register memory (RLIMIT_MEMLOCK)";
    case transport::Status::kResources: return "cannot create RDMA resources";
    case transport::Status::kTimeout: return "the RDMA connection timed out";
    default: return transport::to_string(s);
  }
}

}  // namespace

transport::StreamOptions stream_options(const config::ConnectionOptions& o) {
  transport::StreamOptions s;
  uint32_t log2 = 10;
  while (log2 < 29 && (uint64_t{1} << log2) < o.buffer_size) ++log2;
  s.ring_size_log2 = log2;
  s.recv_queue_depth = static_cast<uint16_t>(std::clamp<uint32_t>(o.recv_queue_depth, 4, 255));
  s.send_queue_depth =
      static_cast<uint16_t>(std::clamp<uint32_t>(o.send_queue_depth, 2 * s.recv_queue_depth + 16, 65535));
  // The client waits for its request to be accepted as long as the whole upgrade may take: a server
  // accepts one request at a time, so a burst of connections (iperf -P 4) queues behind the first.
  s.timeout_ms = static_cast<int>(std::max<uint64_t>(std::max(o.connect_timeout_us, o.upgrade_timeout_us) / 1000, 100));
  s.zcopy_threshold = o.zcopy_threshold;
  s.inline_threshold = static_cast<uint32_t>(o.inline_threshold);
  s.keepalive_ms = static_cast<int>(o.keepalive_us / 1000);
  return s;
}

transport::Status listen_rdma(int fd, TrackedSocket* listener, bool log_failure) {
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  if (real().getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) return transport::Status::kInvalid;
  std::unique_ptr<transport::StreamListener> rdma;
  // Options of the listener's own streams come from the rule that matches each accepted connection;
  // the defaults here only size what a request is checked against.
  transport::Status s =
      transport::StreamListener::listen(reinterpret_cast<sockaddr*>(&local), transport::StreamOptions{}, &rdma);
  std::lock_guard lock(listener->listener_mutex);
  if (s != transport::Status::kOk) {
    if (log_failure) log_line("fd %d listener: no RDMA listener on its port (%s): its connections stay tcp", fd, why_not(s));
    return s;
  }
  listener->rdma_listener = std::move(rdma);
  listener->listener_generation = fork_generation();
  return s;
}

void drop_rdma_listener(TrackedSocket* listener) {
  std::lock_guard lock(listener->listener_mutex);
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

UpgradeOutcome upgrade_client(int fd, TrackedSocket* socket, const config::ConnectionOptions& options) {
  transport::Pairing pairing;
  sockaddr_storage server{};
  if (!tuple_of(fd, true, &pairing.tuple, &server)) return {false, true, "no addresses for the connection"};
  pairing.client_nonce = transport::random_nonce();
  std::unique_ptr<transport::RdmaStream> stream;
  transport::Status s =
      transport::RdmaStream::connect(reinterpret_cast<sockaddr*>(&server), pairing, stream_options(options), &stream);
  if (s != transport::Status::kOk) return {false, true, why_not(s)};
  // The peer is tcp2rdma (its listener answered with our nonce): now, and only now, the TCP connection
  // carries the records.
  return adopt_stream(fd, socket, std::move(stream), true);
}

UpgradeOutcome upgrade_server(int fd, TrackedSocket* listener, TrackedSocket* socket,
                              const config::ConnectionOptions& options) {
  transport::TcpTuple tuple;
  sockaddr_storage server{};
  if (!tuple_of(fd, false, &tuple, &server)) return {false, true, "no addresses for the connection"};
  std::unique_ptr<transport::RdmaStream> stream;
  {
    std::lock_guard lock(listener->listener_mutex);
    transport::StreamListener* rdma = listener->rdma_listener.get();
    if (rdma == nullptr) return {false, true, "no RDMA listener on this port"};
    if (listener->listener_generation != fork_generation()) {
      return {false, true, "the RDMA listener belongs to the parent process (pre-fork servers: not yet)"};
    }
    // accept() waits for the client's RDMA connection request up to the rule's upgrade_timeout. A
    // tcp2rdma client sends it right after its TCP connect completes, but its first setup in a process
    // can take over a second on a slow guest; a plain client never sends one, and this wait is what
    // before-return mode costs it (docs/architecture.md).
    auto until = Clock::now() + std::chrono::microseconds(options.upgrade_timeout_us);
    transport::Status s = transport::Status::kWouldBlock;
    for (;;) {
      rdma->collect(kHold);
      s = rdma->accept(tuple, transport::random_nonce(), stream_options(options), &stream);
      if (s != transport::Status::kWouldBlock || Clock::now() >= until) break;
      pollfd p{rdma->fd(), POLLIN, 0};
      real().poll(&p, 1, 20);
    }
    if (s == transport::Status::kWouldBlock) return {false, true, "the client asked for no RDMA connection"};
    if (s != transport::Status::kOk) return {false, true, why_not(s)};
  }
  return adopt_stream(fd, socket, std::move(stream), false);
}

bool upgrade_and_log(int fd, config::Role role, TrackedSocket* listener, const config::Decision& decision) {
  auto* socket = fd_table().find(fd);
  if (socket == nullptr) return true;
  UpgradeOutcome outcome = role == config::Role::kClient ? upgrade_client(fd, socket, *decision.options)
                                                         : upgrade_server(fd, listener, socket, *decision.options);
  char path[192];
  bool required = decision.options->upgrade == config::UpgradeMode::kRequired;
  if (const transport::RdmaStream* stream = socket->stream(); outcome.upgraded && stream != nullptr) {
    snprintf(path, sizeof path, "upgraded to rdma (receive ring %llu KiB, the peer's %llu KiB)",
             static_cast<unsigned long long>(stream->ring_size() >> 10),
             static_cast<unsigned long long>(stream->peer_ring_size() >> 10));
  } else if (required) {
    // The rule would rather have no connection than a TCP one.
    snprintf(path, sizeof path, "fails: the upgrade is required (%s)", outcome.why);
  } else {
    snprintf(path, sizeof path, "stays tcp (%s)", outcome.why);
  }
  log_connection(fd, role, decision, path);
  return outcome.connection_usable && (outcome.upgraded || !required);
}

}  // namespace tcp2rdma::preload
