// Reading the stats segments (stats_segment.h) of every process under the module: what `tcp2rdma
// stat` and `tcp2rdma stats` show. Read-only mappings; every copy checked (the seqlock of a slot, the
// magic, version and sizes of a header), so a writer that changes a slot meanwhile or a file that is
// not a segment never shows as garbage.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "stats/stats_segment.h"

namespace tcp2rdma::stats {

// One connection as a reader saw it (a consistent copy of its slot).
struct ConnectionView {
  int32_t slot = -1;
  int fd = -1;
  bool client = true;
  std::string local, remote;  // "10.77.0.2:5201", "[fd77::2]:5201"
  std::string rule;
  SlotPath path = SlotPath::kFree;
  TcpReason reason = TcpReason::kNone;
  std::string reason_text;
  uint64_t opened_ms = 0;
  uint32_t setup_ms = 0, switch_ms = 0;
  uint32_t ring_kib = 0, peer_ring_kib = 0;
  uint64_t tcp_bytes_in = 0, tcp_bytes_out = 0;
  uint64_t rdma_bytes_in = 0, rdma_bytes_out = 0, zcopy_bytes_out = 0;
  uint32_t credit_stalls = 0, wakeups = 0;  // as of the path watcher's last look
};

struct TotalsView {
  uint64_t decided_rdma = 0, decided_tcp = 0, upgraded = 0;
  uint64_t on_tcp_by_reason[static_cast<size_t>(TcpReason::kCount)] = {};
  uint64_t tcp_bytes_in = 0, tcp_bytes_out = 0, rdma_bytes_in = 0, rdma_bytes_out = 0, zcopy_bytes_out = 0;
  uint64_t setup_ms_log2[16] = {};
  uint64_t slots_exhausted = 0;
  uint64_t descriptors_at_top = 0;  // a gauge (stats_segment.h): summed, never less a baseline
};

struct ProcessView {
  pid_t pid = 0;
  std::string program;
  std::string path;         // the segment's file
  uint64_t start_time = 0;  // the header's: with pid, names the process (a pid can be reused)
  uid_t owner = 0;          // the file's (`tcp2rdma stat --clean` removes only the user's own)
  bool stale = false;       // its process is gone (or a zombie), or the pid names another process now
  TotalsView totals;
  std::vector<ConnectionView> connections;  // slots in use, by slot
};

// Every segment in `dir` (segment_directory() when empty) that this user can read; unreadable,
// foreign or malformed files are skipped, and *skipped (when given) says how many and why. By pid.
std::vector<ProcessView> read_all(const std::string& dir = "", std::vector<std::string>* skipped = nullptr);
// One process's, stale or not; false when it has no segment this user can read.
bool read_process(pid_t pid, ProcessView* out, const std::string& dir = "");
// An address as a slot keeps it: "10.77.0.2:5201", "[fd77::2]:5201", "[::ffff:10.77.0.2]:5201"; "-"
// when the writer did not know it (all zero).
std::string format_address(uint8_t family, const uint8_t* addr, uint16_t port);
const char* to_string(SlotPath path);
const char* to_string(TcpReason reason);

}  // namespace tcp2rdma::stats
