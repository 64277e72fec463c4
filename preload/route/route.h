// What a call on a descriptor goes to, found by one lookup with no side effect (route_of): the
// connection's RDMA stream, its upgrade session while that is still on TCP, the prefix of a connection
// back on TCP, or (an empty route) the kernel socket alone. Two routes are not final: an upgrade that
// is pending (a non-blocking connect that may have completed since) and a switch under way. The data
// calls act on those themselves (data/stream_calls.h, route_for_call), so that nothing starts or
// waits inside the lookup.
#pragma once

#include <cstdint>
#include <utility>

#include "registry/tracked_socket.h"

namespace tcp2rdma::transport {
class RdmaStream;
}

namespace tcp2rdma::preload {

class UpgradeSession;

// A route held for the length of one call: its socket (and so the stream) is not destroyed
// meanwhile, even when another thread closes the last descriptor; the last holder ends it then
// (SocketHold). Converts to the stream, or null when the route is not the stream.
class StreamRef {
 public:
  enum class Kind : uint8_t {
    kKernel,     // the kernel socket alone (also: not a socket of ours)
    kStream,     // the RDMA stream
    kSession,    // on TCP while the upgrade is under way: the kernel call, counted (session_calls.cpp)
    kPrefixed,   // back on TCP, with the peer's bytes from the stream to read before the kernel's
    kPending,    // not final: the pending upgrade of a non-blocking connect is to run first
    kSwitching,  // not final: the byte-exact switch is under way; wait for its end, then look again
  };

  StreamRef() noexcept = default;
  StreamRef(SocketHold socket, transport::RdmaStream* stream) noexcept
      : socket_(std::move(socket)), stream_(stream), kind_(stream != nullptr ? Kind::kStream : Kind::kKernel) {}
  static StreamRef of_kind(Kind kind, SocketHold socket, UpgradeSession* session = nullptr) noexcept {
    StreamRef ref(std::move(socket), nullptr);
    ref.kind_ = kind;
    ref.session_ = session;
    return ref;
  }
  // A call on a connection back on TCP whose return to RDMA is planned, which goes to the kernel
  // (kKernel), or to the prefix and then the kernel (kPrefixed): counted on its socket until this
  // route goes (TrackedSocket::begin_tcp_call), so that a return starts only while no such call is
  // under way. The caller has counted it.
  static StreamRef counted_on_tcp(Kind kind, SocketHold socket) noexcept {
    StreamRef ref = of_kind(kind, std::move(socket));
    ref.counted_ = true;
    return ref;
  }
  StreamRef(StreamRef&& other) noexcept
      : socket_(std::move(other.socket_)),
        stream_(std::exchange(other.stream_, nullptr)),
        session_(std::exchange(other.session_, nullptr)),
        kind_(std::exchange(other.kind_, Kind::kKernel)),
        counted_(std::exchange(other.counted_, false)) {}
  StreamRef& operator=(StreamRef&& other) noexcept {
    if (this == &other) return *this;
    end_count();
    socket_ = std::move(other.socket_);
    stream_ = std::exchange(other.stream_, nullptr);
    session_ = std::exchange(other.session_, nullptr);
    kind_ = std::exchange(other.kind_, Kind::kKernel);
    counted_ = std::exchange(other.counted_, false);
    return *this;
  }
  ~StreamRef() { end_count(); }
  StreamRef(const StreamRef&) = delete;
  StreamRef& operator=(const StreamRef&) = delete;

  Kind kind() const noexcept { return kind_; }
  operator transport::RdmaStream*() const noexcept { return stream_; }
  transport::RdmaStream* operator->() const noexcept { return stream_; }
  // The upgrade session on a kSession route (the call goes to TCP, counted), else null.
  UpgradeSession* session() const noexcept { return kind_ == Kind::kSession ? session_ : nullptr; }
  // The session whose switch a kSwitching route waits for.
  UpgradeSession* switching_session() const noexcept { return kind_ == Kind::kSwitching ? session_ : nullptr; }
  TrackedSocket* socket() const noexcept { return socket_.get(); }
  bool prefixed() const noexcept { return kind_ == Kind::kPrefixed; }
  // Whether the call is the module's to make: on the stream, on TCP counted for an upgrade, or on TCP
  // after a prefix.
  bool ours() const noexcept { return kind_ == Kind::kStream || kind_ == Kind::kSession || kind_ == Kind::kPrefixed; }
  // A route whose call is counted (counted_on_tcp): a poll must go through the module's own path,
  // which holds its routes for the whole sleep.
  bool counted() const noexcept { return counted_; }

 private:
  void end_count() noexcept {
    if (TrackedSocket* socket = socket_.get(); counted_ && socket != nullptr) socket->end_tcp_call();
    counted_ = false;
  }

  SocketHold socket_;
  transport::RdmaStream* stream_ = nullptr;
  UpgradeSession* session_ = nullptr;
  Kind kind_ = Kind::kKernel;
  bool counted_ = false;
};

// The route of a call on `socket` now, held: one look at its path (TrackedSocket::path), never a wait,
// never a start.
StreamRef route_of(SocketHold socket) noexcept;

// The stream of fd if it has one now, held; never waits and never starts anything (for epoll's
// bookkeeping, which runs under its own lock).
StreamRef current_stream(int fd) noexcept;

}  // namespace tcp2rdma::preload
