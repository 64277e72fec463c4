// The module's state for one kernel TCP socket that a rule could move onto RDMA. dup'd descriptors
// share one TrackedSocket, as they share one kernel socket; it lives until the last of them is closed.
#pragma once

#include <atomic>
#include <cstdint>

namespace tcp2rdma::preload {

enum class SocketRole : uint8_t {
  kUnknown,   // created, neither connected nor listening yet
  kListener,  // listen() succeeded
  kClient,    // this program called connect()
  kServer,    // returned by accept() on a listener
};

class TrackedSocket {
 public:
  TrackedSocket(int domain, SocketRole role) : domain_(domain), role_(role) {}
  TrackedSocket(const TrackedSocket&) = delete;
  TrackedSocket& operator=(const TrackedSocket&) = delete;

  int domain() const noexcept { return domain_; }
  SocketRole role() const noexcept { return role_.load(std::memory_order_acquire); }
  void set_role(SocketRole role) noexcept { role_.store(role, std::memory_order_release); }

  // One reference per descriptor that maps to this socket.
  void add_ref() noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }
  // Drops one reference; deletes the socket with the last one.
  void release() noexcept {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

 private:
  ~TrackedSocket() = default;

  const int domain_;
  std::atomic<SocketRole> role_;
  std::atomic<int> refs_{1};
};

}  // namespace tcp2rdma::preload
