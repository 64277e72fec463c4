// Which file descriptors are TCP sockets the module keeps state for. Every intercepted call asks this
// first, so a lookup for an fd that is not ours must cost one or two atomic loads and nothing else.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>

#include "own_calls.h"

namespace tcp2rdma::preload {

class TrackedSocket;

// A flat two-level array indexed by fd: pages of atomic pointers, allocated the first time an fd in
// their range is tracked and never freed (so a reader never sees a page disappear). Reads take no lock;
// writers to one fd are serialised by the kernel's own fd allocation plus the wrappers' close/dup order.
class FdTable {
 public:
  constexpr FdTable() = default;
  ~FdTable();  // frees the pages; the process-wide table is never destroyed (see fd_table.cpp)
  FdTable(const FdTable&) = delete;
  FdTable& operator=(const FdTable&) = delete;

  static constexpr int kPageBits = 12;
  static constexpr int kPageSize = 1 << kPageBits;
  static constexpr int kPages = 1024;
  static constexpr int kMaxFd = kPageSize * kPages;  // beyond any RLIMIT_NOFILE Debian allows by default

  TrackedSocket* find(int fd) const noexcept {
    if (static_cast<unsigned>(fd) >= static_cast<unsigned>(kMaxFd)) return nullptr;
    const Slot* page = pages_[fd >> kPageBits].load(std::memory_order_acquire);
    if (page == nullptr) return nullptr;
    TrackedSocket* socket = page[fd & (kPageSize - 1)].load(std::memory_order_acquire);
    // The transport's own calls (and librdmacm's for it) are never on an application's socket, whatever
    // the table says of their descriptor's number (own_calls.h). Checked only for a tracked number.
    if (socket != nullptr && transport::OwnCalls::active()) [[unlikely]] return nullptr;
    return socket;
  }

  // Stores `socket` for fd and returns what was there. False when fd is out of range or the page could
  // not be allocated: the caller then leaves the socket untracked (plain TCP).
  bool exchange(int fd, TrackedSocket* socket, TrackedSocket** previous) noexcept;

  // One past the highest fd ever tracked: bounds scans such as close_range.
  int high_water() const noexcept { return high_water_.load(std::memory_order_acquire); }

 private:
  using Slot = std::atomic<TrackedSocket*>;
  std::array<std::atomic<Slot*>, kPages> pages_{};
  std::atomic<int> high_water_{0};
};

FdTable& fd_table() noexcept;

}  // namespace tcp2rdma::preload
