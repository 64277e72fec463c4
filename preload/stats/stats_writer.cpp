// The process's stats segment (stats_writer.h): made once, on the first decided connection, then
// written with atomics only.
//
// Slots are claimed without a lock: a free slot has an even `seq` and path kFree; a writer claims it
// by moving `seq` from that even value to the next odd one (a compare-and-swap: of two claimants one
// wins, and one that read the slot before another claimed and freed it finds `seq` moved on), writes
// it, and makes `seq` even again. Every later change of the slot's identity fields takes it the same
// way, so a path watcher and an application thread never write one slot at once.
//
// A slot handle carries the segment's generation besides its index: a forked child's new segment, or
// one made again after exec failed, must never take writes meant for a slot of the old one.
#include "stats/stats_writer.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "os_calls.h"
#include "own_descriptors.h"
#include "stats/segment_file.h"

namespace tcp2rdma::stats {
namespace {

constexpr int kIndexBits = 16;  // kSlotCount
static_assert((uint32_t{1} << kIndexBits) == kSlotCount);
constexpr uint32_t kGenerationMask = 0x7fff;  // handles stay positive int32

enum State : int { kUntried, kMaking, kMade, kOff };
std::atomic<int> g_state{kUntried};
std::atomic<Header*> g_header{nullptr};
std::atomic<uint32_t> g_generation{1};
std::atomic<uint32_t> g_hint{0};  // where the next claim starts looking
char g_path[256];  // the file, once made (remove_segment)

struct SavedErrno {
  int saved = errno;
  ~SavedErrno() { errno = saved; }
};

Slot* slots(Header* h) { return reinterpret_cast<Slot*>(reinterpret_cast<char*>(h) + kHeaderSize); }

uint64_t now_ms() {
  timespec t{};
  clock_gettime(CLOCK_REALTIME, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1000 + static_cast<uint64_t>(t.tv_nsec) / 1000000;
}

// The segment, made on first use; null when there is none.
Header* segment() {
  if (Header* h = g_header.load(std::memory_order_acquire)) return h;
  int expected = kUntried;
  if (g_state.compare_exchange_strong(expected, kMaking, std::memory_order_acq_rel)) {
    Header* h = make_segment(g_path, sizeof g_path);
    g_header.store(h, std::memory_order_release);
    g_state.store(h != nullptr ? kMade : kOff, std::memory_order_release);
    return h;
  }
  while (g_state.load(std::memory_order_acquire) == kMaking) sched_yield();  // another thread makes it
  return g_header.load(std::memory_order_acquire);
}

int32_t handle(uint32_t index) {
  return static_cast<int32_t>(((g_generation.load(std::memory_order_relaxed) & kGenerationMask) << kIndexBits) | index);
}

// The slot a handle names in the current segment, or null (no segment, or a handle of an older one).
Slot* slot_of(int32_t h) {
  if (h < 0) return nullptr;
  auto bits = static_cast<uint32_t>(h);
  if ((bits >> kIndexBits) != (g_generation.load(std::memory_order_relaxed) & kGenerationMask)) return nullptr;
  Header* header = g_header.load(std::memory_order_acquire);
  return header != nullptr ? &slots(header)[bits & (kSlotCount - 1)] : nullptr;
}

// Takes the slot's identity fields for writing: true once `seq` went from `even` to odd.
bool try_take(Slot* s, uint32_t even) {
  return (even & 1) == 0 && s->seq.compare_exchange_strong(even, even + 1, std::memory_order_acquire);
}

// Takes a slot in use (its owner's change): waits out another writer of the same slot.
uint32_t take(Slot* s) {
  for (;;) {
    uint32_t seq = s->seq.load(std::memory_order_relaxed);
    if (try_take(s, seq)) return seq;
    sched_yield();
  }
}

void give_back(Slot* s, uint32_t taken_at) { s->seq.store(taken_at + 2, std::memory_order_release); }

void copy_text(char* to, size_t size, const char* from) {
  size_t n = from != nullptr ? strnlen(from, size - 1) : 0;
  if (n > 0) std::memcpy(to, from, n);
  std::memset(to + n, 0, size - n);
}

void copy_address(const sockaddr* a, uint8_t* addr, uint16_t* port, uint8_t* family) {
  std::memset(addr, 0, 16);
  *port = 0;
  if (a == nullptr) return;
  if (a->sa_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(a);
    std::memcpy(addr, &v4->sin_addr, 4);
    *port = ntohs(v4->sin_port);
    *family = AF_INET;
  } else if (a->sa_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(a);
    std::memcpy(addr, &v6->sin6_addr, 16);
    *port = ntohs(v6->sin6_port);
    *family = AF_INET6;
  }
}

void count_reason(Header* h, TcpReason reason) {
  auto i = static_cast<size_t>(reason);
  if (i < static_cast<size_t>(TcpReason::kCount)) h->totals.on_tcp_by_reason[i].fetch_add(1, std::memory_order_relaxed);
}

// A connection's counter and the process's, by n (the data path's one cost: relaxed additions).
void add(std::atomic<uint64_t>* mine, std::atomic<uint64_t>* all, uint64_t n) {
  if (n == 0) return;
  mine->fetch_add(n, std::memory_order_relaxed);
  all->fetch_add(n, std::memory_order_relaxed);
}

void note_high(Header* h, uint32_t index) {
  uint32_t high = h->slots_high.load(std::memory_order_relaxed);
  while (high < index + 1 && !h->slots_high.compare_exchange_weak(high, index + 1, std::memory_order_release)) {
  }
}

}  // namespace

const char* segment_directory() {
  static const char* const dir = [] {
    const char* d = std::getenv("TCP2RDMA_STATS_DIR");
    return d != nullptr && *d != '\0' ? d : "/dev/shm";
  }();
  return dir;
}

int32_t open_slot(const SlotIdentity& who) {
  SavedErrno keep;
  Header* h = segment();
  if (h == nullptr) return kNoSlot;
  (who.decided_rdma ? h->totals.decided_rdma : h->totals.decided_tcp).fetch_add(1, std::memory_order_relaxed);
  h->totals.descriptors_at_top.store(transport::own_descriptors_at_top(), std::memory_order_relaxed);
  uint32_t start = g_hint.load(std::memory_order_relaxed);
  for (uint32_t n = 0; n < kSlotCount; ++n) {
    uint32_t index = (start + n) & (kSlotCount - 1);
    Slot* s = &slots(h)[index];
    uint32_t seq = s->seq.load(std::memory_order_acquire);
    // seq first: if the claim below finds it unchanged, nobody took the slot after this look at path.
    if (s->path.load(std::memory_order_relaxed) != static_cast<uint32_t>(SlotPath::kFree) || !try_take(s, seq)) continue;
    s->fd = who.fd;
    s->role = who.client ? 1 : 2;
    s->family = 0;
    copy_address(who.local, s->local_addr, &s->local_port, &s->family);
    copy_address(who.remote, s->remote_addr, &s->remote_port, &s->family);
    copy_text(s->rule, sizeof s->rule, who.rule);
    copy_text(s->reason_text, sizeof s->reason_text, who.decided_rdma ? "" : "the rules say tcp");
    s->opened_ms = now_ms();
    s->setup_ms = s->switch_ms = 0;
    s->ring_kib.store(0, std::memory_order_relaxed);
    s->peer_ring_kib.store(0, std::memory_order_relaxed);
    for (auto* c : {&s->tcp_bytes_in, &s->tcp_bytes_out, &s->rdma_bytes_in, &s->rdma_bytes_out, &s->zcopy_bytes_out}) {
      c->store(0, std::memory_order_relaxed);
    }
    s->credit_stalls.store(0, std::memory_order_relaxed);
    s->wakeups.store(0, std::memory_order_relaxed);
    TcpReason reason = who.decided_rdma ? TcpReason::kNone : TcpReason::kRule;
    s->reason.store(static_cast<uint32_t>(reason), std::memory_order_relaxed);
    s->path.store(static_cast<uint32_t>(who.decided_rdma ? SlotPath::kSwitching : SlotPath::kTcp), std::memory_order_relaxed);
    if (!who.decided_rdma) count_reason(h, reason);
    give_back(s, seq);
    note_high(h, index);
    g_hint.store(index + 1, std::memory_order_relaxed);
    return handle(index);
  }
  h->totals.slots_exhausted.fetch_add(1, std::memory_order_relaxed);
  return kNoSlot;
}

void slot_on_rdma(int32_t slot, uint32_t ring_kib, uint32_t peer_ring_kib, uint32_t setup_ms, uint32_t switch_ms) {
  Slot* s = slot_of(slot);
  if (s == nullptr) return;
  Header* h = g_header.load(std::memory_order_acquire);
  uint32_t at = take(s);
  s->setup_ms = setup_ms;
  s->switch_ms = switch_ms;
  s->reason_text[0] = '\0';
  s->ring_kib.store(ring_kib, std::memory_order_relaxed);
  s->peer_ring_kib.store(peer_ring_kib, std::memory_order_relaxed);
  s->reason.store(static_cast<uint32_t>(TcpReason::kNone), std::memory_order_relaxed);
  s->path.store(static_cast<uint32_t>(SlotPath::kRdma), std::memory_order_relaxed);
  give_back(s, at);
  h->totals.upgraded.fetch_add(1, std::memory_order_relaxed);
  size_t bucket = 0;
  while (bucket < 15 && (uint64_t{1} << bucket) <= setup_ms) ++bucket;  // [i]: 2^(i-1) .. 2^i ms
  h->totals.setup_ms_log2[bucket].fetch_add(1, std::memory_order_relaxed);
}

void slot_on_tcp(int32_t slot, TcpReason reason, const char* why) {
  Slot* s = slot_of(slot);
  if (s == nullptr) return;
  Header* h = g_header.load(std::memory_order_acquire);
  uint32_t at = take(s);
  bool was_rdma = s->path.load(std::memory_order_relaxed) == static_cast<uint32_t>(SlotPath::kRdma);
  copy_text(s->reason_text, sizeof s->reason_text, why);
  s->reason.store(static_cast<uint32_t>(reason), std::memory_order_relaxed);
  s->path.store(static_cast<uint32_t>(was_rdma ? SlotPath::kBackOnTcp : SlotPath::kTcp), std::memory_order_relaxed);
  give_back(s, at);
  count_reason(h, reason);
}

void slot_add_rdma(int32_t slot, uint64_t in, uint64_t out, uint64_t zcopy_out) {
  Slot* s = slot_of(slot);
  if (s == nullptr) return;
  Totals& t = g_header.load(std::memory_order_acquire)->totals;
  add(&s->rdma_bytes_in, &t.rdma_bytes_in, in);
  add(&s->rdma_bytes_out, &t.rdma_bytes_out, out);
  add(&s->zcopy_bytes_out, &t.zcopy_bytes_out, zcopy_out);
}

void slot_add_tcp(int32_t slot, uint64_t in, uint64_t out) {
  Slot* s = slot_of(slot);
  if (s == nullptr) return;
  Totals& t = g_header.load(std::memory_order_acquire)->totals;
  add(&s->tcp_bytes_in, &t.tcp_bytes_in, in);
  add(&s->tcp_bytes_out, &t.tcp_bytes_out, out);
}

void slot_refresh(int32_t slot, uint32_t ring_kib, uint32_t peer_ring_kib, uint64_t credit_stalls, uint64_t wakeups) {
  Slot* s = slot_of(slot);
  if (s == nullptr) return;
  s->ring_kib.store(ring_kib, std::memory_order_relaxed);
  s->peer_ring_kib.store(peer_ring_kib, std::memory_order_relaxed);
  s->credit_stalls.store(static_cast<uint32_t>(std::min<uint64_t>(credit_stalls, UINT32_MAX)), std::memory_order_relaxed);
  s->wakeups.store(static_cast<uint32_t>(std::min<uint64_t>(wakeups, UINT32_MAX)), std::memory_order_relaxed);
}

void close_slot(int32_t slot) {
  Slot* s = slot_of(slot);
  if (s == nullptr) return;
  uint32_t at = take(s);
  s->path.store(static_cast<uint32_t>(SlotPath::kFree), std::memory_order_relaxed);
  give_back(s, at);
  uint32_t index = static_cast<uint32_t>(slot) & (kSlotCount - 1);
  g_hint.store(std::min(g_hint.load(std::memory_order_relaxed), index), std::memory_order_relaxed);
}

bool names_own_slot(int32_t slot) { return slot_of(slot) != nullptr; }

void forget_parent_segment() {
  SavedErrno keep;
  Header* h = g_header.exchange(nullptr, std::memory_order_acq_rel);
  g_generation.fetch_add(1, std::memory_order_relaxed);
  if (h != nullptr) ::munmap(h, segment_size());  // the parent's file stays the parent's
  g_hint.store(0, std::memory_order_relaxed);
  g_state.store(kUntried, std::memory_order_release);
}

void remove_segment() {
  SavedErrno keep;
  int expected = kMade;
  if (!g_state.compare_exchange_strong(expected, kOff, std::memory_order_acq_rel)) return;
  // Unmapping would race a writer of another thread still counting: the mapping stays (the file
  // goes; the pages go with the process).
  ::unlink(g_path);
}

}  // namespace tcp2rdma::stats
