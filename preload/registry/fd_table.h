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
// A call that uses the socket holds it (hold()): a close() in another thread then only takes the
// descriptor away, as the kernel keeps a socket for a call in progress.
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

  // The socket fd names now, without a reference: another thread's close() may free it at any moment,
  // so the answer is for comparing and for knowing that fd is (or was) ours, never for following,
  // unless the caller holds the socket already. One or two atomic loads for an fd that is not ours.
  TrackedSocket* find(int fd) const noexcept {
    const Slot* slot = slot_of(fd);
    if (slot == nullptr) return nullptr;
    TrackedSocket* socket = slot->socket.load(std::memory_order_acquire);
    // The transport's own calls (and librdmacm's for it) are never on an application's socket, whatever
    // the table says of their descriptor's number (own_calls.h). Checked only for a tracked number.
    if (socket != nullptr && transport::OwnCalls::active()) [[unlikely]] return nullptr;
    return socket;
  }

  // The socket fd names now with a reference taken for the caller (who releases it), or null. The
  // reference is taken on the live socket or not at all: exchange() lets go of a socket it took out
  // only once no lookup that may have read it is still between reading and taking its reference.
  TrackedSocket* hold(int fd) noexcept;

  // Stores `socket` for fd and returns what was there, for the caller to release: by then no hold() can
  // still take a reference on it. (Called from a signal handler that interrupted this thread's own
  // hold() on fd, *previous is null instead, and that hold() releases the socket once done.) False
  // when fd is out of range or the page could not be allocated: the caller then leaves the socket
  // untracked (plain TCP).
  bool exchange(int fd, TrackedSocket* socket, TrackedSocket** previous) noexcept;

  // In a forked child, before anything else of the module runs: a thread of the parent that was inside
  // hold() at the fork is not in the child, and its count would make exchange() wait forever.
  void forget_holders_after_fork() noexcept;

  // One past the highest fd ever tracked: bounds scans such as close_range.
  int high_water() const noexcept { return high_water_.load(std::memory_order_acquire); }

 private:
  struct Slot {
    std::atomic<TrackedSocket*> socket;
    // Threads inside hold() for this fd, between reading `socket` and taking their reference.
    std::atomic<unsigned> holders;
  };
  const Slot* slot_of(int fd) const noexcept {
    if (static_cast<unsigned>(fd) >= static_cast<unsigned>(kMaxFd)) return nullptr;
    const Slot* page = pages_[fd >> kPageBits].load(std::memory_order_acquire);
    return page == nullptr ? nullptr : &page[fd & (kPageSize - 1)];
  }
  // Returns once no thread is inside hold() for `slot`.
  static void wait_for_holders(Slot& slot) noexcept;

  std::array<std::atomic<Slot*>, kPages> pages_{};
  std::atomic<int> high_water_{0};
};

FdTable& fd_table() noexcept;

}  // namespace tcp2rdma::preload
