// How many connections the pinning limit lets a process hold on RDMA, counted with the transport's own
// sizing rules (transport/pin_budget.h) so that doctor's number is the module's. Pure but for
// read_memlock_facts(): host tests feed it limits.
#pragma once

#include <cstdint>
#include <optional>

#include "options.h"
#include "report.h"

namespace tcp2rdma::tools::doctor {

// What bounds the memory a process may pin.
struct MemlockFacts {
  std::optional<uint64_t> rlimit;  // RLIMIT_MEMLOCK's soft limit; nullopt: unlimited
  bool ipc_lock = false;           // CAP_IPC_LOCK is effective: the kernel ignores RLIMIT_MEMLOCK
  uint64_t mem_total = 0;          // bytes; 0 when unknown
};

MemlockFacts read_memlock_facts();

// The transport's limit: RLIMIT_MEMLOCK unless CAP_IPC_LOCK lifts it, and never above a quarter of the
// machine's memory. nullopt when nothing bounds it.
std::optional<uint64_t> pin_limit(const MemlockFacts& facts);

// The rings the module would ask for (preload/registry/connection_policy.cpp): each starts at 64 KiB,
// or at the rule's buffer_size when that is smaller, and may grow to buffer_size.
struct RingPlan {
  uint32_t start_log2 = 16;
  uint32_t grown_log2 = 0;  // 0: no rule file named a size, growth is not counted
};
inline constexpr uint32_t kModuleStartRingLog2 = 16;
// The module's rounding of a rule's buffer_size: the next power of two, from 1 KiB to 512 MiB.
uint32_t ring_log2_of(uint64_t buffer_size);
// The plan for rules whose largest RDMA buffer_size is `largest_buffer_size` (0: no such rule).
RingPlan ring_plan(uint64_t largest_buffer_size);

// The send queue depth the module gives a connection with the rules' default options: at least twice
// the receive depth plus 16 (preload/registry/connection_policy.cpp). The mailbox slots each
// connection pins come from it.
inline constexpr uint32_t kSendQueueDepth = 2 * config::ConnectionOptions{}.recv_queue_depth + 16 >
                                                    config::ConnectionOptions{}.send_queue_depth
                                                ? 2 * config::ConnectionOptions{}.recv_queue_depth + 16
                                                : config::ConnectionOptions{}.send_queue_depth;

struct FirstRings {
  uint64_t connections = 0;
  uint32_t ring_log2 = 0;       // the first connection's ring (later ones may get smaller rings)
  uint32_t last_ring_log2 = 0;  // the last one's
  uint64_t per_connection = 0;  // what that first connection pins: its ring, the peer's mirror, mailboxes
  bool capped = false;          // counting stopped at kCountCap: "at least"
};
inline constexpr uint64_t kCountCap = 10'000'000;

// Connections made one after another until the next one finds no room, each taking the ring
// ring_log2_within() gives it with what the earlier ones pinned, its peer's ring as large as its own.
// `grows`: the rings grow later (the rules' buffer_size is above the start), so that a crowded
// process starts them at 8 KiB (transport::crowded_first_ring_log2).
FirstRings first_rings_within(uint64_t limit, uint32_t start_log2, bool grows = false);

struct GrownRings {
  uint64_t connections = 0;  // how many at once could hold a ring of 2^wanted
  uint32_t largest_log2 = 0;  // the largest ring one connection may grow to (at most wanted; 0: none)
};
// Each grown connection keeps, besides its grown ring, the mirror of its peer's first ring and its
// mailboxes; growth leaves a quarter of the limit for first rings (growth_log2_within()).
GrownRings grown_rings_within(uint64_t limit, uint32_t grown_log2, uint32_t start_log2);

// Fewer connections than this: the machine fails the check (a server with a handful of clients
// already falls back to TCP); fewer than the second: a warning.
inline constexpr uint64_t kFailBelowConnections = 8;
inline constexpr uint64_t kWarnBelowConnections = 64;

Check judge_memlock(const MemlockFacts& facts, const RingPlan& plan);

}  // namespace tcp2rdma::tools::doctor
