// What `tcp2rdma stats` prints (docs/stats.md): the counters of every live process's segment summed,
// less a baseline taken by `stats --reset`. Pure: the command reads the segments and the baseline.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "stats/stats_reader.h"

namespace tcp2rdma::tools::stats_view {

// Every counter of a TotalsView in one fixed order: what the sums, the subtraction and the baseline
// file walk, so that a counter added to the view is added to all three at once.
inline constexpr size_t kCounterCount = 3 + static_cast<size_t>(stats::TcpReason::kCount) + 5 + 16 + 1;
std::array<uint64_t*, kCounterCount> counters(stats::TotalsView* totals);
std::array<uint64_t, kCounterCount> counter_values(const stats::TotalsView& totals);

// The counters of each process at the last reset, by pid and start time (a pid reused by another
// process names another entry, which no live process matches).
struct Baseline {
  uint64_t written_ms = 0;  // CLOCK_REALTIME
  std::map<std::pair<pid_t, uint64_t>, stats::TotalsView> processes;
};

struct Sum {
  size_t processes = 0;  // live ones
  stats::TotalsView totals;
  uint64_t open[5] = {};  // connections in a slot now, by SlotPath (not subject to the baseline)
};

// The live processes' counters summed, each less its baseline entry (never below zero); processes
// started since the reset count in full, stale segments not at all.
Sum sum_live(const std::vector<stats::ProcessView>& processes, const Baseline* baseline);

// The report for people: counts, reasons, bytes (exact, with the size people read), the setup times'
// non-empty buckets. `since` is what the counts start from ("the processes' start", a reset's time).
std::string format_text(const Sum& sum, const std::string& since);
// One line: {"processes":..,"since_ms":..|null,"connections":{..,"slots_exhausted":..},"descriptors_at_top":..,"open":{..},
// "on_tcp_by_reason":{..},"bytes":{..},"setup_ms":[{"from":..,"to":..|null,"count":..}]}, exact integers.
std::string format_json(const Sum& sum, const Baseline* baseline);

// Bucket i of the setup histogram holds setups of [2^(i-1), 2^i) ms (0: under 1 ms; the last: every
// longer one). "under 1 ms", "1-2 ms", "512-1024 ms", "16384 ms or more".
std::string bucket_label(size_t i);

}  // namespace tcp2rdma::tools::stats_view
