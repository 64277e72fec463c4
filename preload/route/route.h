// What a call on a descriptor goes to: the connection's RDMA stream, its upgrade session while that is
// still on TCP, the prefix of a connection back on TCP, or (an empty route) the kernel socket alone.
#pragma once

#include <utility>

#include "registry/tracked_socket.h"

namespace tcp2rdma::transport {
class RdmaStream;
}

namespace tcp2rdma::preload {

class UpgradeSession;

// An upgraded stream held for the length of one call: its socket (and so the stream) is not
// destroyed meanwhile, even when another thread closes the last descriptor; the last holder ends it
// then (SocketHold). Converts to the stream, or null when the connection is not on RDMA. While the
// connection's upgrade is under way and it is still on TCP, it holds the session instead (session()
// is set, the stream is null): the call is then made on TCP and counted (session_calls.cpp).
class StreamRef {
 public:
  StreamRef() noexcept = default;
  StreamRef(SocketHold socket, transport::RdmaStream* stream, UpgradeSession* session = nullptr) noexcept
      : socket_(std::move(socket)), stream_(stream), session_(session) {}
  // A socket back on TCP whose prefix is still to be read (move_back.h): reads serve it first.
  static StreamRef prefixed(SocketHold socket) noexcept {
    StreamRef ref(std::move(socket), nullptr);
    ref.prefixed_ = true;
    return ref;
  }
  StreamRef(StreamRef&& other) noexcept
      : socket_(std::move(other.socket_)),
        stream_(std::exchange(other.stream_, nullptr)),
        session_(std::exchange(other.session_, nullptr)),
        prefixed_(std::exchange(other.prefixed_, false)) {}
  StreamRef& operator=(StreamRef&& other) noexcept {
    socket_ = std::move(other.socket_);
    stream_ = std::exchange(other.stream_, nullptr);
    session_ = std::exchange(other.session_, nullptr);
    prefixed_ = std::exchange(other.prefixed_, false);
    return *this;
  }
  StreamRef(const StreamRef&) = delete;
  StreamRef& operator=(const StreamRef&) = delete;

  operator transport::RdmaStream*() const noexcept { return stream_; }
  transport::RdmaStream* operator->() const noexcept { return stream_; }
  UpgradeSession* session() const noexcept { return session_; }
  TrackedSocket* socket() const noexcept { return socket_.get(); }
  bool prefixed() const noexcept { return prefixed_; }
  // Whether the call is the module's to make: on the stream, on TCP counted for an upgrade's switch, or on TCP
  // after a prefix.
  bool ours() const noexcept { return stream_ != nullptr || session_ != nullptr || prefixed_; }

 private:
  SocketHold socket_;
  transport::RdmaStream* stream_ = nullptr;
  UpgradeSession* session_ = nullptr;
  bool prefixed_ = false;
};

// The stream of fd if it has one now, held; never waits and never starts anything (for epoll's
// bookkeeping, which runs under its own lock).
StreamRef current_stream(int fd) noexcept;

}  // namespace tcp2rdma::preload
