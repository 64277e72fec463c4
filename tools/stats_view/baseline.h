// The baseline `tcp2rdma stats --reset` leaves for later `stats` to subtract (docs/stats.md). The
// segments' counters only grow and belong to their processes: a reset is the reader's own, a file of
// each live process's counters at that moment.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "stats/stats_reader.h"
#include "totals.h"

namespace tcp2rdma::tools::stats_view {

// $XDG_RUNTIME_DIR/tcp2rdma-stats.baseline when that is set (private to the user, emptied at logout),
// else /tmp/tcp2rdma-stats.baseline.<uid>.
std::string baseline_path();

// The file's text: a first line "tcp2rdma-stats-baseline 1", "written_ms N", then one line per
// process: pid, start time and its kCounterCount counters in counters()'s order, all decimal.
std::string format_baseline(const std::vector<stats::ProcessView>& live, uint64_t now_ms);
// nullopt when the text is not such a file (*problem says where).
std::optional<Baseline> parse_baseline(const std::string& text, std::string* problem);

// Written whole or not at all (a temporary file renamed over it), mode 0600.
bool write_baseline(const std::string& path, const std::string& text, std::string* problem);
// nullopt with *problem empty: there is no baseline; with *problem set: one that cannot be used
// (unreadable, malformed, or not this user's file).
std::optional<Baseline> read_baseline(const std::string& path, std::string* problem);

}  // namespace tcp2rdma::tools::stats_view
