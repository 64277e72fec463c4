#include "upgrade/upgrade.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <system_error>
#include <thread>
#include <vector>

#include "registry/connection_policy.h"
#include "registry/fd_table.h"
#include "upgrade/switch_frames.h"
#include "upgrade/upgrade_session.h"
#include "readiness/epoll_sets.h"
#include "prefork/listener_directory.h"
#include "util/log.h"
#include "util/quiet_thread.h"
#include "libc/real_calls.h"
#include "stream_listener.h"
#include "tuple_address.h"

namespace tcp2rdma::preload {
namespace {

using Clock = std::chrono::steady_clock;

// The switch itself: both peers are tcp2rdma by then and neither waits on its application, so it takes
// a few round trips and the reading of what TCP still has in flight.
constexpr std::chrono::milliseconds kSwitchTimeout{10000};
// The most application bytes one TCP connection can still have in flight when its peer freezes: its
// send buffer and our receive buffer, each at most the kernel's tcp_wmem / tcp_rmem maximum (doubled:
// setsockopt's sizes are), read from this host and taken for the peer's too. A HELLO claiming more
// is refused: the tail is read into memory before the stream is used, and the peer must not choose
// how much of ours it takes (it was 256 MiB).
uint64_t max_tcp_tail() {
  static const uint64_t bound = [] {
    auto third = [](const char* path) -> uint64_t {
      unsigned long long a = 0, b = 0, c = 0;
      FILE* f = std::fopen(path, "re");
      if (f == nullptr) return 0;
      int n = std::fscanf(f, "%llu %llu %llu", &a, &b, &c);
      std::fclose(f);
      return n == 3 ? c : 0;
    };
    uint64_t r = third("/proc/sys/net/ipv4/tcp_rmem"), w = third("/proc/sys/net/ipv4/tcp_wmem");
    if (r == 0 || w == 0) return uint64_t{32} << 20;
    return std::max<uint64_t>(2 * (r + w), uint64_t{8} << 20);
  }();
  return bound;
}
// Switches run in threads of their own (upgrade: background); beyond this many at once a connection
// stays TCP.
constexpr int kMaxBackgroundSwitches = 64;
std::atomic<int> g_background_switches{0};

// An IPv4 peer of a dual-stack IPv6 socket appears as ::ffff:a.b.c.d: both ends must name it alike.
void put_address(const sockaddr_storage& s, uint8_t* addr, uint16_t* port, uint8_t* family) {
  *family = transport::tuple_address(reinterpret_cast<const sockaddr*>(&s), addr);
  *port = ntohs(s.ss_family == AF_INET ? reinterpret_cast<const sockaddr_in*>(&s)->sin_port
                                       : reinterpret_cast<const sockaddr_in6*>(&s)->sin6_port);
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

// Exactly n bytes from the stream within the deadline: the peer's HELLO and ACK.
bool stream_read_exact(transport::RdmaStream& stream, uint8_t* buf, size_t n, Clock::time_point deadline) {
  size_t got = 0;
  while (got < n) {
    iovec iov{buf + got, n - got};
    size_t done = 0;
    transport::Status s = stream.read(&iov, 1, transport::kNonBlocking, &done);
    if (s == transport::Status::kOk) {
      if (done == 0) return false;  // the end of the stream
      got += done;
      continue;
    }
    if (s != transport::Status::kWouldBlock) return false;
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    if (left <= 0) return false;
    pollfd p{stream.readiness_fd(), POLLIN, 0};
    real().poll(&p, 1, left);
    (void)stream.readiness();  // takes the news the fd announced
  }
  return true;
}

bool stream_write_all(transport::RdmaStream& stream, const uint8_t* buf, size_t n) {
  iovec iov{const_cast<uint8_t*>(buf), n};
  size_t done = 0;
  return stream.write(&iov, 1, 0, &done) == transport::Status::kOk && done == n;
}

// True when the TCP connection is at its end (the peer shut its sending side down) within the
// deadline; false when a byte comes instead, or an error.
bool tcp_at_end(int fd, Clock::time_point deadline) {
  for (;;) {
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (real().poll(&p, 1, left) <= 0) continue;
    uint8_t byte = 0;
    ssize_t r = real().recv(fd, &byte, 1, MSG_DONTWAIT);
    if (r == 0) return true;
    if (r > 0 || (errno != EAGAIN && errno != EINTR)) return false;
  }
}

// What a step of the switch came to: go on; stay on TCP (nothing was written anywhere either
// application reads); or reset the connection (the two byte counts are split).
struct Step {
  enum Kind { kGoOn, kStaysTcp, kBroken } kind = kGoOn;
  const char* why = "";
};

// HELLO and ACK both ways on the stream: the peer's HELLO in *peer, and how many of its TCP bytes
// this side has still to read in *tail. Until this side has sent ACK the peer writes no record, and
// neither has this side: a failure up to there leaves the TCP connection as it was.
Step exchange_counts(transport::RdmaStream& stream, const Hello& ours, uint64_t received, bool is_client,
                     Clock::time_point deadline, Hello* peer, uint64_t* tail) {
  auto hello = encode_hello(ours);
  if (!stream_write_all(stream, hello.data(), hello.size())) return {Step::kStaysTcp, "the RDMA connection failed at HELLO"};
  std::array<uint8_t, kHelloSize> peer_hello{};
  if (!stream_read_exact(stream, peer_hello.data(), peer_hello.size(), deadline)) {
    return {Step::kStaysTcp, "no HELLO from the peer"};
  }
  std::optional<Hello> decoded = decode_hello(peer_hello);
  // A client never says its TCP ended: its shutdown() keeps the connection on TCP (it could write no
  // record after its end, and the server needs the client's record).
  std::optional<uint64_t> left = decoded && !(decoded->tcp_ended && !is_client)
                                     ? bytes_left_on_tcp(decoded->tcp_bytes, received, max_tcp_tail())
                                     : std::nullopt;
  if (!left) return {Step::kStaysTcp, "the peer's HELLO is malformed or claims an impossible byte count"};
  auto ack = encode_ack(decoded->tcp_bytes);
  if (!stream_write_all(stream, ack.data(), ack.size())) return {Step::kStaysTcp, "the RDMA connection failed at ACK"};
  std::array<uint8_t, kAckSize> peer_ack{};
  if (!stream_read_exact(stream, peer_ack.data(), peer_ack.size(), deadline) || decode_ack(peer_ack) != ours.tcp_bytes) {
    return {Step::kBroken, "the peer's ACK is missing or does not echo our byte count"};
  }
  *peer = *decoded;
  *tail = *left;
  return {};
}

// The peer's application bytes still on TCP (into *bytes), then what must follow them: its record,
// checked against this stream's nonces, or, when its HELLO said so, the end of its TCP stream. Not a
// record, or another connection's: whoever holds this RDMA connection is not the peer of this TCP
// connection. Never guessed at: the connection is reset.
Step read_peer_tail(int fd, uint64_t tail, bool peer_ended, const NoncePair& nonces, Clock::time_point deadline,
                    std::vector<uint8_t>* bytes) {
  bytes->resize(tail);
  if (!tcp_exchange(fd, bytes->data(), bytes->size(), false, deadline)) {
    return {Step::kBroken, "the TCP connection ended before the peer's last bytes on it"};
  }
  if (peer_ended) {
    if (!tcp_at_end(fd, deadline)) return {Step::kBroken, "bytes on TCP after the end the peer announced"};
    return {};
  }
  std::array<uint8_t, kRecordSize> record{};
  if (!tcp_exchange(fd, record.data(), record.size(), false, deadline)) {
    return {Step::kBroken, "the TCP connection ended before the peer's handover record"};
  }
  if (check_record(record, nonces) != RecordCheck::kProven) {
    return {Step::kBroken, "the peer's handover record did not match this connection"};
  }
  return {};
}

// The switch (docs/architecture.md, "The byte-exact handover"): freeze, HELLO and ACK on the stream;
// the client writes its record on TCP right after its last application byte; the server reads the
// client's remaining TCP bytes and its record, and only then writes its own (or, when its application
// had already ended its TCP sending side, nothing: the TCP end marks the boundary), which the client
// reads the same way. The TCP bytes read by the switch go ahead of the stream's (its prefix).
UpgradeOutcome switch_onto(int fd, TrackedSocket* socket, UpgradeSession* session,
                           std::unique_ptr<transport::RdmaStream> stream, bool is_client) {
  Hello ours;
  uint64_t received = 0;
  if (!session->freeze(&ours.tcp_bytes, &received, &ours.tcp_ended)) {
    stream->abort();
    return {false, true, "closed, or the process forked or ran another program, before the switch"};
  }
  auto deadline = Clock::now() + kSwitchTimeout;
  Hello peer;
  uint64_t tail = 0;
  std::vector<uint8_t> tcp_tail;
  NoncePair nonces = nonces_of(*stream);
  auto record = encode_record(nonces);
  Step step = exchange_counts(*stream, ours, received, is_client, deadline, &peer, &tail);
  if (step.kind == Step::kGoOn && is_client && !tcp_exchange(fd, record.data(), record.size(), true, deadline)) {
    step = {Step::kBroken, "could not write the handover record on TCP"};
  }
  if (step.kind == Step::kGoOn) step = read_peer_tail(fd, tail, peer.tcp_ended, nonces, deadline, &tcp_tail);
  if (step.kind == Step::kGoOn && !is_client && !ours.tcp_ended &&
      !tcp_exchange(fd, record.data(), record.size(), true, deadline)) {
    step = {Step::kBroken, "could not write the handover record on TCP"};
  }
  // Our application ended its sending side on TCP: the stream's sending side ends too, so that the
  // peer reads the end right after our last bytes.
  if (step.kind == Step::kGoOn && ours.tcp_ended && stream->shutdown_write() != transport::Status::kOk) {
    step = {Step::kBroken, "the RDMA connection failed at the end of our sending side"};
  }
  if (step.kind != Step::kGoOn) {
    UpgradeOutcome failed{false, step.kind == Step::kStaysTcp, step.why};
    failed.detail = stream->failure_detail();
    stream->abort();
    return failed;
  }
  stream->set_unread_prefix(std::move(tcp_tail));
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
  // The peer's ring costs us a bounce buffer as large (pinned): up to 4 times our own, refused beyond.
  s.max_peer_ring_size_log2 = std::min<uint32_t>(log2 + 2, 29);
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

namespace {

enum class ListenerKind { kOnListenersPort, kOnOwnPort, kDirectory };

// An rdma_cm listener for `listener` at its address: on its port (kOnListenersPort, kDirectory) or on
// one rdma_cm picks (kOnOwnPort).
transport::Status make_rdma_listener(int fd, TrackedSocket* listener, ListenerKind kind, bool log_failure) {
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
  std::lock_guard lock(listener->listener_mutex);
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

namespace {

// What an upgrade needs to know of its connection, taken in the application's call: the switch thread
// must not touch the descriptor before the switch freezes it.
struct Connection {
  int fd = -1;
  bool is_client = false;
  TrackedSocket* socket = nullptr;
  TrackedSocket* listener = nullptr;  // server: the listener it was accepted from
  config::Decision decision;
  bool have_tuple = false;
  transport::TcpTuple tuple{};
  sockaddr_storage server{};
  Clock::time_point started = Clock::now();
};

Connection describe(int fd, config::Role role, TrackedSocket* socket, TrackedSocket* listener,
                    const config::Decision& decision) {
  Connection c;
  c.fd = fd;
  c.is_client = role == config::Role::kClient;
  c.socket = socket;
  c.listener = listener;
  c.decision = decision;
  c.have_tuple = tuple_of(fd, c.is_client, &c.tuple, &c.server);
  return c;
}

transport::Status connect_stream(const Connection& c, std::unique_ptr<transport::RdmaStream>* out) {
  transport::Pairing pairing;
  pairing.tuple = c.tuple;
  pairing.client_nonce = transport::random_nonce();
  return transport::RdmaStream::connect(reinterpret_cast<const sockaddr*>(&c.server), pairing,
                                        stream_options(*c.decision.options), out);
}

// In a process of a pre-fork server that listens on a port of its own (another process holds the
// listener's port): while the connection's request is awaited, the directory says where the holder
// is to send it.
class PublishedTuple {
 public:
  PublishedTuple(TrackedSocket* listener, const transport::TcpTuple& tuple) : tuple_(tuple) {
    uint16_t port = 0;
    {
      std::lock_guard lock(listener->listener_mutex);
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
void decline(TrackedSocket* listener, const transport::TcpTuple& tuple) {
  std::lock_guard lock(listener->listener_mutex);
  transport::StreamListener* rdma = listener->rdma_listener.get();
  if (rdma != nullptr && listener->listener_generation == fork_generation()) rdma->decline(tuple);
}

// Waits (up to the rule's upgrade_timeout) for the client's RDMA connection request for this
// connection and accepts it. A tcp2rdma client sends it right after its TCP connect completes, but
// its first setup in a process can take over a second on a slow guest; a plain client never sends
// one. The listener is locked per look, not for the wait: other connections' upgrades go on.
transport::Status accept_stream(const Connection& c, UpgradeSession* session,
                                std::unique_ptr<transport::RdmaStream>* out) {
  const config::ConnectionOptions& options = *c.decision.options;
  auto until = Clock::now() + std::chrono::microseconds(options.upgrade_timeout_us);
  PublishedTuple published(c.listener, c.tuple);
  for (;;) {
    int listener_fd = -1;
    transport::Status s = transport::Status::kWouldBlock;
    std::unique_ptr<transport::RdmaStream> answered;
    {
      std::lock_guard lock(c.listener->listener_mutex);
      transport::StreamListener* rdma = c.listener->rdma_listener.get();
      if (rdma == nullptr || c.listener->listener_generation != fork_generation()) return transport::Status::kRejected;
      rdma->collect(kRequestHold);
      s = rdma->begin_accept(c.tuple, transport::random_nonce(), stream_options(options), &answered);
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
    if (Clock::now() >= until || session->phase() == UpgradeSession::Phase::kOver) {
      decline(c.listener, c.tuple);  // a request that comes later is answered at once
      return transport::Status::kWouldBlock;
    }
    pollfd p{listener_fd, POLLIN, 0};
    real().poll(&p, 1, 20);
  }
}

UpgradeOutcome run_upgrade_steps(const Connection& c, UpgradeSession* session) {
  if (!c.have_tuple) return {false, true, "no addresses for the connection"};
  if (!c.is_client && c.listener == nullptr) return {false, true, "no RDMA listener on this port"};
  std::unique_ptr<transport::RdmaStream> stream;
  transport::Status s = c.is_client ? connect_stream(c, &stream) : accept_stream(c, session, &stream);
  if (s == transport::Status::kWouldBlock) return {false, true, "the client asked for no RDMA connection"};
  if (s == transport::Status::kRejected && !c.is_client) return {false, true, "no RDMA listener on this port"};
  if (s != transport::Status::kOk) return {false, true, why_not(s)};
  // The peer is tcp2rdma (its listener answered with our nonce, or the client asked for this very
  // connection): now, and only now, the switch.
  auto established = Clock::now();
  UpgradeOutcome outcome = switch_onto(c.fd, c.socket, session, std::move(stream), c.is_client);
  outcome.setup_ms = std::chrono::duration_cast<std::chrono::milliseconds>(established - c.started).count();
  outcome.switch_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - established).count();
  return outcome;
}

// No exception leaves an upgrade (it runs in a thread of its own, or in an application's C call):
// memory short anywhere in it (a stream's parts, the peer's TCP tail) keeps the connection on TCP,
// or, past the switch's point of no return, resets it; either way with a log line.
UpgradeOutcome run_upgrade(const Connection& c, UpgradeSession* session) noexcept {
  try {
    return run_upgrade_steps(c, session);
  } catch (const std::bad_alloc&) {
    return {false, session->phase() == UpgradeSession::Phase::kOnTcp, "out of memory"};
  } catch (...) {
    return {false, session->phase() == UpgradeSession::Phase::kOnTcp, "an internal error"};
  }
}

// The log line and the end of the session. After a switch (the phase is kSwitching, so the descriptor
// is still the application's), epoll registrations move onto the stream; a connection broken half-way
// is reset when it runs in the background (in the application's call, the caller reports it).
bool conclude(const Connection& c, UpgradeSession* session, const UpgradeOutcome& outcome, bool background) {
  char path[256];
  bool required = c.decision.options->upgrade == config::UpgradeMode::kRequired;
  const transport::RdmaStream* stream = c.socket->stream();
  if (outcome.upgraded && stream != nullptr) {
    c.socket->follows_fork.store(c.decision.options->on_fork == config::ForkMode::kTcp, std::memory_order_relaxed);
    snprintf(path, sizeof path,
             "upgraded to rdma (receive ring %llu KiB, the peer's %llu KiB; switched after %llu bytes sent "
             "and %llu received on tcp; setup %ld ms, switch %ld ms)",
             static_cast<unsigned long long>(stream->ring_size() >> 10),
             static_cast<unsigned long long>(stream->peer_ring_size() >> 10),
             static_cast<unsigned long long>(session->sent()), static_cast<unsigned long long>(session->received()),
             outcome.setup_ms, outcome.switch_ms);
  } else if (required) {
    // The rule would rather have no connection than a TCP one.
    snprintf(path, sizeof path, "fails: the upgrade is required (%s%s%s)", outcome.why,
             outcome.detail.empty() ? "" : ": ", outcome.detail.c_str());
  } else {
    snprintf(path, sizeof path, "stays tcp (%s%s%s)", outcome.why, outcome.detail.empty() ? "" : ": ",
             outcome.detail.c_str());
  }
  bool usable = outcome.connection_usable && (outcome.upgraded || !required);
  if (session->phase() == UpgradeSession::Phase::kOnTcp) {
    // It never got to the switch. Settled meanwhile (closed, fork, exec, exit): that call logged it,
    // and a close forgot the registrations (the descriptor may name another socket by now).
    if (session->end_on_tcp()) {
      log_line("%s: %s", session->label(), path);
      epoll_move_pending(c.fd, false);
    }
    return usable;
  }
  if (session->phase() == UpgradeSession::Phase::kOver) return usable;  // settled before the freeze
  log_line("%s: %s", session->label(), path);
  epoll_move_pending(c.fd, stream != nullptr);
  if (!outcome.connection_usable && background) {
    // Reset, so the peer never reads a clean end; SO_ERROR says ECONNRESET.
    c.socket->pending_error.store(ECONNRESET, std::memory_order_release);
    reset_connection(c.fd);
  }
  session->finish();
  return usable;
}

// A session without its wake fd (no descriptor left above the application's limit, own_descriptors.h)
// cannot tell the application's pollers that the connection moved: the connection stays TCP.
bool stays_for_want_of_descriptors(UpgradeSession* session) {
  if (session->wake_fd() >= 0 || !session->end_on_tcp()) return false;
  log_line("%s: stays tcp (%s)", session->label(), why_not(transport::Status::kDescriptors));
  return true;
}

}  // namespace

bool upgrade_and_log(int fd, config::Role role, TrackedSocket* listener, const config::Decision& decision) {
  SocketHold socket = SocketHold::of(fd), hold_listener(listener);  // the whole upgrade: seconds, maybe
  if (!socket) return true;
  UpgradeSession* session = socket->start_session();
  if (session == nullptr) return true;  // decided and upgraded once already
  char label[kConnectionLabelSize];
  describe_connection(fd, role, decision, label, sizeof label);
  session->set_label(label);
  if (stays_for_want_of_descriptors(session)) return decision.options->upgrade != config::UpgradeMode::kRequired;
  Connection c = describe(fd, role, socket.get(), listener, decision);
  return conclude(c, session, run_upgrade(c, session), false);
}

void upgrade_in_background(int fd, config::Role role, TrackedSocket* listener, const config::Decision& decision) {
  SocketHold socket = SocketHold::of(fd);
  if (!socket) return;
  if (g_background_switches.fetch_add(1) >= kMaxBackgroundSwitches) {
    g_background_switches.fetch_sub(1);
    log_connection(fd, role, decision, "stays tcp (too many upgrades under way in this process)");
    transport::TcpTuple tuple{};
    sockaddr_storage server{};
    if (listener != nullptr && tuple_of(fd, false, &tuple, &server)) decline(listener, tuple);
    return;
  }
  UpgradeSession* session = socket->start_session();
  if (session == nullptr) {
    g_background_switches.fetch_sub(1);
    return;
  }
  char label[kConnectionLabelSize];
  describe_connection(fd, role, decision, label, sizeof label);
  session->set_label(label);
  if (stays_for_want_of_descriptors(session)) {
    g_background_switches.fetch_sub(1);
    return;
  }
  std::shared_ptr<Connection> c;
  try {
    c = std::make_shared<Connection>(describe(fd, role, socket.get(), listener, decision));
  } catch (const std::bad_alloc&) {
    if (session->end_on_tcp()) log_line("%s: stays tcp (out of memory)", label);
    epoll_move_pending(fd, false);
    g_background_switches.fetch_sub(1);
    return;
  }
  socket->add_ref();  // the thread's, until it is done with the socket and its listener
  if (listener != nullptr) listener->add_ref();
  auto let_go = [c] {
    c->socket->release();
    if (c->listener != nullptr) c->listener->release();
    g_background_switches.fetch_sub(1);
  };
  AllSignalsBlocked quiet;  // quiet_thread.h
  try {
    std::thread([c, session, let_go] {
      conclude(*c, session, run_upgrade(*c, session), true);
      let_go();
    }).detach();
  } catch (const std::exception&) {  // no thread (system_error), or no memory for it
    if (session->end_on_tcp()) log_line("%s: stays tcp (cannot start a thread for the upgrade)", label);
    epoll_move_pending(fd, false);
    let_go();
  }
}

}  // namespace tcp2rdma::preload
