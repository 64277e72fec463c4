#include "libc/kept_descriptors.h"

#include <atomic>
#include <climits>

namespace tcp2rdma::preload {
namespace {

// A slot holds fd + 1 (0: free), so that the table starts out free without a constructor.
constexpr int kSlots = 256;
std::atomic<int> g_slots[kSlots];
// The lowest descriptor ever marked (INT_MAX: none): the application's close() of a lower one, which
// is nearly every close (the module's descriptors sit above the application's limit), looks no further.
std::atomic<int> g_lowest{INT_MAX};

}  // namespace

void keep_from_application(int fd) noexcept {
  if (fd < 0 || fd == INT_MAX || kept_from_application(fd)) return;
  for (int low = g_lowest.load(); fd < low && !g_lowest.compare_exchange_weak(low, fd);) {
  }
  for (std::atomic<int>& slot : g_slots) {
    int free = 0;
    if (slot.compare_exchange_strong(free, fd + 1, std::memory_order_acq_rel)) return;
  }
}

void release_to_application(int fd) noexcept {
  if (fd < 0 || fd == INT_MAX) return;
  for (std::atomic<int>& slot : g_slots) {
    int mine = fd + 1;
    if (slot.compare_exchange_strong(mine, 0, std::memory_order_acq_rel)) return;
  }
}

bool kept_from_application(int fd) noexcept {
  if (fd < 0 || fd == INT_MAX || fd < g_lowest.load(std::memory_order_relaxed)) return false;
  for (const std::atomic<int>& slot : g_slots) {
    if (slot.load(std::memory_order_acquire) == fd + 1) return true;
  }
  return false;
}

int first_kept_in(unsigned first, unsigned last) noexcept {
  long lowest = -1;
  for (const std::atomic<int>& slot : g_slots) {
    long fd = static_cast<long>(slot.load(std::memory_order_acquire)) - 1;
    if (fd < 0 || static_cast<unsigned long>(fd) < first || static_cast<unsigned long>(fd) > last) continue;
    if (lowest < 0 || fd < lowest) lowest = fd;
  }
  return static_cast<int>(lowest);
}

}  // namespace tcp2rdma::preload
