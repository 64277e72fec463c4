// The shared-memory segment each process under the module keeps (docs/stats.md): what `tcp2rdma stat`
// and `tcp2rdma stats` read. One file per process, /dev/shm/tcp2rdma.<pid> (TCP2RDMA_STATS_DIR
// overrides the directory, for tests), mode 0600, made on the process's first connection decision and
// removed at its exit; a file whose process is gone (or whose pid now names another process: the start
// time differs) is stale. The writer is the process alone, lock-free and without system calls once
// the segment exists; readers map it read-only and check what they copy.
//
// Layout (version 1): a Header at offset 0, then kSlotCount Slots of kSlotSize bytes. The file is
// sized for every slot at once but is sparse (tmpfs gives a page when it is first written): a process
// with few connections costs a few pages.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace tcp2rdma::stats {

inline constexpr char kMagic[8] = {'T', '2', 'R', 'S', 'T', 'A', 'T', 'S'};
inline constexpr uint32_t kVersion = 1;
inline constexpr uint32_t kSlotCount = 65536;  // connections at once; one more stays uncounted
inline constexpr size_t kSlotSize = 256;
inline constexpr size_t kHeaderSize = 4096;
inline constexpr size_t kReasonSize = 96;   // the log's words for why a connection is on TCP
inline constexpr size_t kRuleNameSize = 32;
inline constexpr size_t kProgramSize = 64;

// Where a connection's bytes go (preload's Path, folded for the reader).
enum class SlotPath : uint32_t {
  kFree = 0,        // the slot holds no connection
  kTcp = 1,         // decided (or fallen back) to TCP; reason says why
  kSwitching = 2,   // an upgrade is under way (setup or switch); bytes still on TCP
  kRdma = 3,        // on its RDMA stream
  kBackOnTcp = 4,   // was on RDMA, on TCP again (fork/exec moved it back, or the path failed over)
};

// Why a connection is on TCP, as a category the totals count (the slot also keeps the words).
enum class TcpReason : uint32_t {
  kNone = 0,          // on RDMA, or not decided yet
  kRule = 1,          // the rules say tcp (or no rule matched)
  kPeerDeclined = 2,  // the peer has no tcp2rdma listener, or declined (it says why)
  kNoRdma = 3,        // no device, no route, the RDMA connection failed or timed out
  kResources = 4,     // pinning budget, descriptors, memory, threads here
  kSwitchFailed = 5,  // the byte-exact switch did not happen (stayed TCP) or broke (reset)
  kMovedBack = 6,     // fork, exec or spawn moved it back
  kFailedOver = 7,    // the RDMA path failed and the connection went on over TCP
  kClosedEarly = 8,   // closed (or the process forked, exec'd, exited) before the upgrade ended
  kOther = 9,
  kCount = 10,
};

// Per process. Counters only grow (a reset is the reader's: it keeps a baseline).
struct Totals {
  std::atomic<uint64_t> decided_rdma;                 // connections a rule sent towards RDMA
  std::atomic<uint64_t> decided_tcp;                  // connections the rules kept on TCP
  std::atomic<uint64_t> upgraded;                     // connections that reached RDMA
  std::atomic<uint64_t> on_tcp_by_reason[static_cast<size_t>(TcpReason::kCount)];
  std::atomic<uint64_t> tcp_bytes_in, tcp_bytes_out;  // of connections this module tracked, on TCP
  std::atomic<uint64_t> rdma_bytes_in, rdma_bytes_out;
  std::atomic<uint64_t> zcopy_bytes_out;
  std::atomic<uint64_t> setup_ms_log2[16];            // setups by duration: [i] counts 2^(i-1) .. 2^i ms
  std::atomic<uint64_t> slots_exhausted;              // connections not shown: every slot was taken
  // A gauge, not a count: the module's descriptors at the top of the application's range now, for
  // want of room above its RLIMIT_NOFILE (transport/own_descriptors.h); refreshed at each connection's
  // decision and end.
  std::atomic<uint64_t> descriptors_at_top;
};

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t header_size;  // kHeaderSize
  uint32_t slot_size;    // kSlotSize
  uint32_t slot_count;   // kSlotCount
  int32_t pid;
  uint32_t reserved;
  uint64_t start_time;   // field 22 of /proc/<pid>/stat (clock ticks since boot): tells a reused pid
  char program[kProgramSize];  // /proc/self/comm, NUL-terminated
  std::atomic<uint32_t> slots_high;  // slots [0, slots_high) may be in use
  uint32_t reserved2;
  Totals totals;
};
static_assert(sizeof(Header) <= kHeaderSize);

// One connection. `seq` guards the identity fields (everything but the atomic counters): the writer
// makes it odd, writes, makes it even; a reader copies between two equal even reads.
struct alignas(64) Slot {
  std::atomic<uint32_t> seq;
  std::atomic<uint32_t> path;    // SlotPath
  std::atomic<uint32_t> reason;  // TcpReason
  int32_t fd;
  uint8_t role;                  // 1 client, 2 server
  uint8_t family;                // AF_INET or AF_INET6 (an IPv4-mapped address stays AF_INET6)
  uint16_t local_port, remote_port;  // host order
  uint8_t local_addr[16], remote_addr[16];  // IPv4 in the first 4 bytes
  char rule[kRuleNameSize];
  char reason_text[kReasonSize];
  uint64_t opened_ms;            // CLOCK_REALTIME, when decided
  uint32_t setup_ms, switch_ms;  // of the upgrade, once on RDMA
  std::atomic<uint32_t> ring_kib, peer_ring_kib;
  std::atomic<uint64_t> tcp_bytes_in, tcp_bytes_out;
  std::atomic<uint64_t> rdma_bytes_in, rdma_bytes_out, zcopy_bytes_out;
  // The stream's own counts (transport's StreamCounters), refreshed with the rings at each of the
  // path watcher's looks (every keepalive interval): writes that found no room or credit, and wakeups
  // the peer sent us.
  std::atomic<uint32_t> credit_stalls, wakeups;
};
static_assert(sizeof(Slot) <= kSlotSize);

inline constexpr size_t segment_size() { return kHeaderSize + size_t{kSlotCount} * kSlotSize; }

}  // namespace tcp2rdma::stats
