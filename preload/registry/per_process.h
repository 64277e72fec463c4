// One object per process for the module's own machinery that threads serve (the upgrade engine's
// thread and pools): a forked child makes its own, since the parent's threads are not in it and the
// parent's locks may have been held at the fork. The parent's object is left to the child unused,
// never freed (destroying it could wait for a lock nobody will let go).
#pragma once

#include <atomic>
#include <new>

#include "registry/tracked_socket.h"

namespace tcp2rdma::preload {

// The object in `slot` if this process made it, else a new T(fork_generation()); T has a member
// `generation`. Null only without memory.
template <class T>
T* this_process_instance(std::atomic<T*>& slot) noexcept {
  unsigned generation = fork_generation();
  T* current = slot.load(std::memory_order_acquire);
  if (current != nullptr && current->generation == generation) return current;
  T* fresh = new (std::nothrow) T(generation);
  if (fresh == nullptr) return nullptr;
  if (slot.compare_exchange_strong(current, fresh, std::memory_order_acq_rel)) return fresh;
  delete fresh;  // another thread of this process made it first
  return current;
}

}  // namespace tcp2rdma::preload
