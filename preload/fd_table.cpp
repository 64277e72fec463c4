#include "fd_table.h"

#include <cstdlib>
#include <new>

namespace tcp2rdma::preload {

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
  TrackedSocket* old = page[fd & (kPageSize - 1)].exchange(socket, std::memory_order_acq_rel);
  if (previous != nullptr) *previous = old;
  int high = high_water_.load(std::memory_order_relaxed);
  while (socket != nullptr && high <= fd &&
         !high_water_.compare_exchange_weak(high, fd + 1, std::memory_order_acq_rel)) {
  }
  return true;
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
