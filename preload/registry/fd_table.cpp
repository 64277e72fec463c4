#include "registry/fd_table.h"

#include <sched.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <utility>

#include "registry/tracked_socket.h"

namespace tcp2rdma::preload {

namespace {
// The slot this thread is inside hold() for: exchange() in a signal handler that interrupted that
// hold() must not wait for its own thread. What such an exchange() took out, and its slot, for that
// hold() to release once done. initial-exec: see own_calls.h.
thread_local const void* t_holding [[gnu::tls_model("initial-exec")]] = nullptr;
thread_local TrackedSocket* t_release_after_hold [[gnu::tls_model("initial-exec")]] = nullptr;
thread_local const void* t_release_slot [[gnu::tls_model("initial-exec")]] = nullptr;
}  // namespace

bool FdTable::exchange(int fd, TrackedSocket* socket, TrackedSocket** previous) noexcept {
  if (static_cast<unsigned>(fd) >= static_cast<unsigned>(kMaxFd)) return false;
  auto& page_ref = pages_[fd >> kPageBits];
  Slot* page = page_ref.load(std::memory_order_acquire);
  if (page == nullptr) {
    // calloc, not new: zeroed atomics of pointer type are valid null pointers, and no exception may
    // escape into the application.
    auto* fresh = static_cast<Slot*>(std::calloc(kPageSize, sizeof(Slot)));
    if (fresh == nullptr) return false;
    if (page_ref.compare_exchange_strong(page, fresh, std::memory_order_acq_rel)) {
      page = fresh;
    } else {
      std::free(fresh);  // another thread installed the page first; `page` now holds it
    }
  }
  Slot& slot = page[fd & (kPageSize - 1)];
  TrackedSocket* old = slot.socket.exchange(socket, std::memory_order_seq_cst);
  if (old != nullptr && t_holding == &slot) {
    // A signal handler of a thread that is inside hold() for fd: that hold() may still take its
    // reference on `old` once the handler returns, so it lets go of the table's afterwards. (A second
    // one in the same hold() is beyond what the module supports in handlers: kept, not freed.)
    if (t_release_after_hold == nullptr) {
      t_release_after_hold = old;
      t_release_slot = &slot;
    }
    old = nullptr;
  }
  if (old != nullptr) wait_for_holders(slot);
  if (previous != nullptr) *previous = old;
  int high = high_water_.load(std::memory_order_relaxed);
  while (socket != nullptr && high <= fd &&
         !high_water_.compare_exchange_weak(high, fd + 1, std::memory_order_acq_rel)) {
  }
  return true;
}

TrackedSocket* FdTable::hold(int fd) noexcept {
  if (find(fd) == nullptr) return nullptr;  // not ours: the common case stays two loads
  auto& slot = const_cast<Slot&>(*slot_of(fd));
  // Announce, then read: with both sequentially consistent, either exchange() sees this thread
  // announced (and waits for it) or this thread reads what exchange() stored.
  // (t_holding is set before this thread counts itself and cleared after: a handler's exchange()
  // that sees it never waits for a count that includes its own thread.)
  const void* outer = std::exchange(t_holding, &slot);
  slot.holders.fetch_add(1, std::memory_order_seq_cst);
  TrackedSocket* socket = slot.socket.load(std::memory_order_seq_cst);
  if (socket != nullptr) socket->add_ref();
  slot.holders.fetch_sub(1, std::memory_order_release);
  std::atomic_signal_fence(std::memory_order_seq_cst);  // not before the count is down
  t_holding = outer;
  if (outer == nullptr && t_release_after_hold != nullptr) {
    wait_for_holders(*const_cast<Slot*>(static_cast<const Slot*>(std::exchange(t_release_slot, nullptr))));
    std::exchange(t_release_after_hold, nullptr)->release();
  }
  return socket;
}

void FdTable::wait_for_holders(Slot& slot) noexcept {
  // A holder is a few instructions from done, unless the scheduler took its CPU: yield ours.
  while (slot.holders.load(std::memory_order_seq_cst) != 0) sched_yield();
}

void FdTable::forget_holders_after_fork() noexcept {
  for (auto& page_ref : pages_) {
    Slot* page = page_ref.load(std::memory_order_relaxed);
    if (page == nullptr) continue;
    for (int i = 0; i < kPageSize; ++i) page[i].holders.store(0, std::memory_order_relaxed);
  }
}

FdTable::~FdTable() {
  for (auto& page : pages_) std::free(page.load(std::memory_order_relaxed));
}

namespace {
// Constant-initialised, so valid before any constructor has run, and never destroyed, so still valid
// while atexit handlers and other objects' destructors call wrappers: the union's destructor does not
// destroy its member.
union ProcessTable {
  constexpr ProcessTable() : table() {}
  ~ProcessTable() {}
  FdTable table;
};
constinit ProcessTable g_process_table;
}  // namespace

FdTable& fd_table() noexcept { return g_process_table.table; }

}  // namespace tcp2rdma::preload
