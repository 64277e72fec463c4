#include "pin_budget.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "os_calls.h"
#include "page_frames.h"
#include "stream_link.h"

namespace tcp2rdma::transport {
namespace {

constexpr int kCapIpcLock = 14;  // linux/capability.h

// Bytes reserved by setups under way in this process (PinReservation).
std::atomic<uint64_t> reserved_bytes{0};
// spares_welcome at the latest reservation (pin_room_for_spares); none are kept before the first.
std::atomic<bool> room_for_spares{false};

// A stream's pinned bytes: its ring, the peer's mirrored (as large as ours when not known), the rest.
uint64_t cost(uint32_t ring_log2, uint32_t peer_log2, uint64_t fixed) {
  uint64_t ring = uint64_t{1} << ring_log2;
  return ring + (peer_log2 != 0 ? uint64_t{1} << peer_log2 : ring) + fixed;
}

// A /proc file's text, whole if it fits `size` - 1 bytes. open and pread are not interposed by the
// module; close is, and goes through os() (os_calls.h).
bool read_proc(const char* path, char* buf, size_t size) {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n = ::pread(fd, buf, size - 1, 0);
  os().close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  return true;
}

// The number after "name:" in such a text (base 10 or 16), or false.
bool field(const char* text, const char* name, int base, uint64_t* value) {
  const char* at = std::strstr(text, name);
  if (at == nullptr) return false;
  *value = std::strtoull(at + std::strlen(name), nullptr, base);  // strtoull skips the blanks
  return true;
}

// What the kernel counts against RLIMIT_MEMLOCK for this process (pinned_vm), and whether it has
// CAP_IPC_LOCK (then nothing is counted against it).
bool read_status(uint64_t* pinned, bool* ipc_lock) {
  char buf[4096];
  uint64_t pinned_kb = 0, caps = 0;
  if (!read_proc("/proc/self/status", buf, sizeof buf) || !field(buf, "VmPin:", 10, &pinned_kb) ||
      !field(buf, "CapEff:", 16, &caps)) {
    return false;
  }
  *pinned = pinned_kb * 1024;
  *ipc_lock = (caps >> kCapIpcLock) & 1;
  return true;
}

// MemTotal and MemAvailable, in bytes.
bool read_meminfo(uint64_t* total, uint64_t* available) {
  char buf[4096];
  uint64_t total_kb = 0, available_kb = 0;
  if (!read_proc("/proc/meminfo", buf, sizeof buf) || !field(buf, "MemTotal:", 10, &total_kb) ||
      !field(buf, "MemAvailable:", 10, &available_kb)) {
    return false;
  }
  *total = total_kb * 1024;
  *available = available_kb * 1024;
  return true;
}

PinState read_pin_state() {
  PinState state;
  uint64_t pinned = 0;
  bool ipc_lock = false;
  // Unreadable (no /proc): nothing is known to be pinned yet, and root is taken to have CAP_IPC_LOCK,
  // as memlock_holds_no_stream() takes it.
  if (!read_status(&pinned, &ipc_lock)) ipc_lock = geteuid() == 0;
  state.pinned = pinned;
  rlimit limit{};
  if (!ipc_lock && os().getrlimit(RLIMIT_MEMLOCK, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    state.limited = true;
    state.limit = limit.rlim_cur;
  }
  uint64_t total = 0, available = 0;
  if (read_meminfo(&total, &available)) {
    uint64_t quarter = total / 4;
    if (!state.limited || quarter < state.limit) state.limit = quarter;
    state.limited = true;
    state.available = available > total / 8 ? available - total / 8 : 0;
  }
  return state;
}

}  // namespace

uint64_t stream_fixed_pin(uint32_t send_queue_depth) {
  uint64_t slots = uint64_t{StreamLink::kMailboxSlot} * send_queue_depth;
  return kPageSize + (slots + kPageSize - 1) / kPageSize * kPageSize;
}

uint32_t ring_log2_within(uint32_t wanted, uint32_t peer_log2, uint64_t fixed, const PinState& state) {
  if (!state.limited) return wanted;
  uint64_t keep_free = state.limit / 16;
  uint64_t left = state.limit > keep_free + state.pinned ? state.limit - keep_free - state.pinned : 0;
  left = std::min(left, state.available);
  if (wanted <= kSmallestBudgetRingLog2) return cost(wanted, peer_log2, fixed) <= left ? wanted : 0;
  uint64_t share = std::min(left, state.limit / 64);
  for (uint32_t r = wanted; r > kSmallestBudgetRingLog2; --r) {
    if (cost(r, peer_log2, fixed) <= share) return r;
  }
  // The smallest ring may take more than a share: better a stream than none while the limit holds it.
  return cost(kSmallestBudgetRingLog2, peer_log2, fixed) <= left ? kSmallestBudgetRingLog2 : 0;
}

uint32_t crowded_first_ring_log2(uint32_t wanted, const PinState& state) {
  if (!state.limited || state.pinned < state.limit / 8) return wanted;
  return std::min(wanted, kCrowdRingLog2);
}

bool spares_welcome(const PinState& state) { return !state.limited || state.pinned < state.limit / 8; }

bool pin_room_for_spares() { return room_for_spares.load(std::memory_order_relaxed); }

uint32_t growth_log2_within(uint32_t wanted, const PinState& state) {
  if (!state.limited) return wanted;
  uint64_t keep_free = state.limit / 4;
  uint64_t left = state.limit > keep_free + state.pinned ? state.limit - keep_free - state.pinned : 0;
  left = std::min({left, state.available, state.limit / 64});
  for (uint32_t r = wanted; r >= kSmallestBudgetRingLog2; --r) {
    if ((uint64_t{1} << r) <= left) return r;
  }
  return 0;
}

RingChoice client_rings(uint32_t wanted, uint32_t max_peer_log2, uint64_t fixed, const PinState& state) {
  if (ring_log2_within(wanted, max_peer_log2, fixed, state) == wanted) return {wanted, max_peer_log2};
  uint32_t r = ring_log2_within(wanted, 0, fixed, state);
  return {r, std::min(r, max_peer_log2)};
}

template <typename Choose>
void PinReservation::reserve(uint64_t fixed, Choose choose) {
  PinState state = read_pin_state();
  const uint64_t pinned = state.pinned;
  uint64_t others = reserved_bytes.load(std::memory_order_relaxed);
  do {  // chosen against what other setups had reserved at the moment ours is added
    state.pinned = pinned + others;
    room_for_spares.store(spares_welcome(state), std::memory_order_relaxed);
    choice_ = choose(state);
    if (choice_.ring_log2 == 0) {
      reserved_ = 0;
      return;
    }
    reserved_ = cost(choice_.ring_log2, choice_.max_peer_log2, fixed);
  } while (!reserved_bytes.compare_exchange_weak(others, others + reserved_, std::memory_order_relaxed));
}

PinReservation::PinReservation(uint32_t wanted, uint32_t peer_log2, uint64_t fixed, bool grows) {
  reserve(fixed, [&](const PinState& state) {
    uint32_t first = grows ? crowded_first_ring_log2(wanted, state) : wanted;
    return RingChoice{ring_log2_within(first, peer_log2, fixed, state), peer_log2};
  });
}

PinReservation PinReservation::for_client(uint32_t wanted, uint32_t max_peer_log2, uint64_t fixed, bool grows) {
  PinReservation r;
  r.reserve(fixed, [&](const PinState& state) {
    if (!grows) return client_rings(wanted, max_peer_log2, fixed, state);
    uint32_t first = crowded_first_ring_log2(wanted, state);
    return client_rings(first, std::min(max_peer_log2, first), fixed, state);
  });
  return r;
}

PinReservation PinReservation::for_growth(uint32_t wanted) {
  PinReservation r;
  // Counted as the ring and a 1 KiB peer ring (reserve counts two rings): the grown ring alone.
  r.reserve(0, [&](const PinState& state) { return RingChoice{growth_log2_within(wanted, state), 10}; });
  return r;
}

void PinReservation::shrink_to(uint64_t bytes) {
  if (bytes >= reserved_) return;
  reserved_bytes.fetch_sub(reserved_ - bytes, std::memory_order_relaxed);
  reserved_ = bytes;
}

PinReservation::~PinReservation() {
  if (reserved_ > 0) reserved_bytes.fetch_sub(reserved_, std::memory_order_relaxed);
}

}  // namespace tcp2rdma::transport
