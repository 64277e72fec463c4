#include "pin_budget.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "os_calls.h"
#include "stream_link.h"

namespace tcp2rdma::transport {
namespace {

constexpr uint64_t kPage = 4096;
constexpr int kCapIpcLock = 14;  // linux/capability.h

// Bytes reserved by setups under way in this process (PinReservation).
std::atomic<uint64_t> reserved_bytes{0};

uint64_t cost(uint32_t ring_log2, uint32_t peer_log2, uint64_t fixed) {
  uint64_t ring = uint64_t{1} << ring_log2;
  return ring + (peer_log2 != 0 ? uint64_t{1} << peer_log2 : ring) + fixed;
}

// The value after "name:" in /proc/self/status, or nullptr.
const char* field(const char* status, const char* name) {
  const char* at = std::strstr(status, name);
  if (at == nullptr) return nullptr;
  at += std::strlen(name);
  while (*at == ' ' || *at == '\t') ++at;
  return at;
}

// What the kernel counts against RLIMIT_MEMLOCK for this process (pinned_vm), and whether it has
// CAP_IPC_LOCK (then nothing is counted against it). open and pread are not interposed; close is,
// and goes through os() (os_calls.h).
bool read_status(uint64_t* pinned, bool* ipc_lock) {
  int fd = ::open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[4096];
  ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  os().close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  const char* pin = field(buf, "VmPin:");
  const char* caps = field(buf, "CapEff:");
  if (pin == nullptr || caps == nullptr) return false;
  *pinned = std::strtoull(pin, nullptr, 10) * 1024;  // in kB
  *ipc_lock = (std::strtoull(caps, nullptr, 16) >> kCapIpcLock) & 1;
  return true;
}

PinState read_pin_state() {
  PinState state;
  rlimit limit{};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return state;
  uint64_t pinned = 0;
  bool ipc_lock = false;
  // Unreadable (no /proc): nothing is known to be pinned yet, and root is taken to have CAP_IPC_LOCK,
  // as memlock_holds_no_stream() takes it.
  if (!read_status(&pinned, &ipc_lock)) ipc_lock = geteuid() == 0;
  if (ipc_lock) return state;
  state.limited = true;
  state.limit = limit.rlim_cur;
  state.pinned = pinned;
  return state;
}

}  // namespace

uint64_t stream_fixed_pin(uint32_t send_queue_depth) {
  uint64_t slots = uint64_t{StreamLink::kMailboxSlot} * send_queue_depth;
  return kPage + (slots + kPage - 1) / kPage * kPage;
}

uint32_t ring_log2_within(uint32_t wanted, uint32_t peer_log2, uint64_t fixed, const PinState& state) {
  if (!state.limited) return wanted;
  uint64_t keep_free = state.limit / 16;
  uint64_t left = state.limit > keep_free + state.pinned ? state.limit - keep_free - state.pinned : 0;
  if (wanted <= kSmallestBudgetRingLog2) return cost(wanted, peer_log2, fixed) <= left ? wanted : 0;
  uint64_t share = std::min(left, state.limit / 64);
  for (uint32_t r = wanted; r > kSmallestBudgetRingLog2; --r) {
    if (cost(r, peer_log2, fixed) <= share) return r;
  }
  // The smallest ring may take more than a share: better a stream than none while the limit holds it.
  return cost(kSmallestBudgetRingLog2, peer_log2, fixed) <= left ? kSmallestBudgetRingLog2 : 0;
}

PinReservation::PinReservation(uint32_t wanted, uint32_t peer_log2, uint64_t fixed, uint32_t* ring_log2) {
  PinState state = read_pin_state();
  limited_ = state.limited;
  *ring_log2 = wanted;
  if (!limited_) return;
  const uint64_t pinned = state.pinned;
  uint64_t others = reserved_bytes.load(std::memory_order_relaxed);
  do {  // chosen against what other setups had reserved at the moment ours is added
    state.pinned = pinned + others;
    *ring_log2 = ring_log2_within(wanted, peer_log2, fixed, state);
    if (*ring_log2 == 0) return;
    reserved_ = cost(*ring_log2, peer_log2, fixed);
  } while (!reserved_bytes.compare_exchange_weak(others, others + reserved_, std::memory_order_relaxed));
}

PinReservation::~PinReservation() {
  if (reserved_ > 0) reserved_bytes.fetch_sub(reserved_, std::memory_order_relaxed);
}

}  // namespace tcp2rdma::transport
