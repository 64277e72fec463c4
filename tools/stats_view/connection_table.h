// What `tcp2rdma stat` prints (docs/stats.md): one row per connection of the processes it is given,
// as a table for people or as JSON for scripts. Pure: the command reads the segments and the clock.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stats/stats_reader.h"

namespace tcp2rdma::tools::stats_view {

struct TableOptions {
  bool all = false;     // -a: connections on TCP too (by default only those RDMA is or was involved in)
  uint64_t now_ms = 0;  // CLOCK_REALTIME, for the ages
};

// A connection the table shows: switching, rdma and back-on-tcp; with `all` also tcp.
bool shown(const stats::ConnectionView& connection, bool all);

// The header and one line per connection shown, columns aligned; a REASON column last when a row on
// TCP is among them. Names and reasons are printed with control characters replaced by '?'.
std::string format_table(const std::vector<stats::ProcessView>& processes, const TableOptions& options);

// {"processes":[{"pid":..,"program":..,"start_time":..,"stale":..,"connections":[{..}]}]} on one line,
// every count an exact integer; the same connections as the table.
std::string format_json(const std::vector<stats::ProcessView>& processes, const TableOptions& options);

// "42s", "5m07s", "3h12m", "2d04h".
std::string format_age(uint64_t ms);
// Both rings of a connection, ours first: "64K/1M"; "-" before any is known.
std::string format_rings(uint32_t ring_kib, uint32_t peer_ring_kib);

}  // namespace tcp2rdma::tools::stats_view
