// The process's side of the stats segment (stats_segment.h): the module writes what its connections
// do, always, with no system call and no lock once the segment exists (made on the first open_slot).
// Every function is safe from any thread, never changes errno, and never fails outward: a segment
// that cannot be made (no /dev/shm, no memory) leaves every call a no-op, and a full table leaves the
// connection uncounted (kNoSlot, Totals::slots_exhausted).
#pragma once

#include <sys/socket.h>

#include <cstdint>

#include "stats/stats_segment.h"

namespace tcp2rdma::stats {

inline constexpr int32_t kNoSlot = -1;

struct SlotIdentity {
  int fd = -1;
  bool client = true;
  const sockaddr* local = nullptr;   // may be null (unknown)
  const sockaddr* remote = nullptr;  // may be null
  const char* rule = "";             // the rule's name ("" when no rule matched)
  bool decided_rdma = false;         // the rule says rdma (the connection starts as kSwitching) or tcp
};

// Takes a free slot for a decided connection; kNoSlot when there is none (or no segment). The
// totals count the decision.
int32_t open_slot(const SlotIdentity& who);
// The connection reached RDMA: path kRdma, its rings and times; Totals::upgraded and the setup
// histogram.
void slot_on_rdma(int32_t slot, uint32_t ring_kib, uint32_t peer_ring_kib, uint32_t setup_ms, uint32_t switch_ms);
// The connection is (or stays, or went back) on TCP: path kTcp, or kBackOnTcp when it had been on
// RDMA; `why` the log's words (truncated), `reason` the category the totals count.
void slot_on_tcp(int32_t slot, TcpReason reason, const char* why);
// Bytes the application moved (plain relaxed atomics: the data path's only cost).
void slot_add_rdma(int32_t slot, uint64_t in, uint64_t out, uint64_t zcopy_out);
void slot_add_tcp(int32_t slot, uint64_t in, uint64_t out);
// What the stream says of itself now (rings grow and shrink; its stalls and wakeups), at the path
// watcher's periodic look.
void slot_refresh(int32_t slot, uint32_t ring_kib, uint32_t peer_ring_kib, uint64_t credit_stalls, uint64_t wakeups);
// The connection is gone (its last descriptor closed): the slot is free again.
void close_slot(int32_t slot);
// Whether `slot` names a slot of this process's segment (not one a forked child inherited).
bool names_own_slot(int32_t slot);

// In a forked child: the parent's segment is not the child's. The child's slots start afresh in a
// segment of its own (made on its first open_slot); the inherited mapping is dropped without
// touching the parent's file. Called by the fork wrapper in the child.
void forget_parent_segment();
// At the process's end (exit, or the last destructor): removes the file. Later calls are no-ops.
void remove_segment();

// For tests: where segments are made (TCP2RDMA_STATS_DIR, else /dev/shm), read once.
const char* segment_directory();

}  // namespace tcp2rdma::stats
