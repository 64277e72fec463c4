// Every segment as `tcp2rdma stat` and `stats` see them: the live processes', the stale ones counted
// apart (not shown: their processes are gone, `stat --clean` removes them), and what could not be read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stats/stats_reader.h"

namespace tcp2rdma::tools::stats_view {

struct Segments {
  std::vector<stats::ProcessView> live;
  std::vector<stats::ProcessView> stale;
  std::vector<std::string> skipped;  // "path: why"
};

// From segment_directory() (TCP2RDMA_STATS_DIR, else /dev/shm).
Segments read_segments();

// On stderr, each prefixed with `command` ("tcp2rdma stat"): every file skipped, and how many stale
// segments there are with the command that removes them.
void print_notices(const char* command, const Segments& segments);

// CLOCK_REALTIME in milliseconds, what the writer stamps a connection with.
uint64_t now_ms();
// A moment as people read it in the local time zone: "2026-11-26 15:02:11".
std::string format_time(uint64_t ms);

}  // namespace tcp2rdma::tools::stats_view
