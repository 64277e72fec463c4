#include "totals.h"

#include <algorithm>

#include "text_format.h"

namespace tcp2rdma::tools::stats_view {
namespace {

using stats::ProcessView;
using stats::TcpReason;
using stats::TotalsView;

constexpr size_t kReasons = static_cast<size_t>(TcpReason::kCount);
constexpr size_t kBuckets = std::size(TotalsView{}.setup_ms_log2);

std::string u(uint64_t value) { return std::to_string(value); }

// "  label", then the count aligned right under the bytes' "in" column (column 44).
std::string count_line(const std::string& label, uint64_t value) {
  std::string number = u(value);
  std::string line = "  " + label;
  size_t used = line.size() + number.size();
  line.append(used < 44 ? 44 - used : 1, ' ');
  return line + number + "\n";
}

// An exact byte count, with the size people read when that says more: "1048576 (1.0M)".
std::string bytes_text(uint64_t bytes) {
  return bytes < 1024 ? u(bytes) : u(bytes) + " (" + format_bytes_short(bytes) + ")";
}

// A line of the bytes table: the label in a column of 20, then two columns of 24 aligned right.
std::string bytes_line(const std::string& label, const std::string& in, const std::string& out) {
  auto right = [](const std::string& text) { return std::string(text.size() < 24 ? 24 - text.size() : 1, ' ') + text; };
  std::string line = label;
  line.append(line.size() < 20 ? 20 - line.size() : 1, ' ');
  return line + right(in) + right(out) + "\n";
}

}  // namespace

std::array<uint64_t*, kCounterCount> counters(TotalsView* t) {
  std::array<uint64_t*, kCounterCount> out{};
  size_t n = 0;
  for (uint64_t* c : {&t->decided_rdma, &t->decided_tcp, &t->upgraded}) out[n++] = c;
  for (uint64_t& c : t->on_tcp_by_reason) out[n++] = &c;
  for (uint64_t* c : {&t->tcp_bytes_in, &t->tcp_bytes_out, &t->rdma_bytes_in, &t->rdma_bytes_out}) out[n++] = c;
  out[n++] = &t->zcopy_bytes_out;
  for (uint64_t& c : t->setup_ms_log2) out[n++] = &c;
  out[n++] = &t->slots_exhausted;
  return out;
}

std::array<uint64_t, kCounterCount> counter_values(const TotalsView& totals) {
  TotalsView copy = totals;
  std::array<uint64_t, kCounterCount> out{};
  std::array<uint64_t*, kCounterCount> from = counters(&copy);
  for (size_t i = 0; i < kCounterCount; ++i) out[i] = *from[i];
  return out;
}

Sum sum_live(const std::vector<ProcessView>& processes, const Baseline* baseline) {
  Sum sum;
  std::array<uint64_t*, kCounterCount> to = counters(&sum.totals);
  for (const ProcessView& p : processes) {
    if (p.stale) continue;
    ++sum.processes;
    std::array<uint64_t, kCounterCount> now = counter_values(p.totals);
    if (baseline != nullptr) {
      auto found = baseline->processes.find({p.pid, p.start_time});
      if (found != baseline->processes.end()) {
        std::array<uint64_t, kCounterCount> then = counter_values(found->second);
        for (size_t i = 0; i < kCounterCount; ++i) now[i] -= std::min(now[i], then[i]);
      }
    }
    for (size_t i = 0; i < kCounterCount; ++i) *to[i] += now[i];
    sum.totals.descriptors_at_top += p.totals.descriptors_at_top;  // a gauge: now, whatever the baseline
    for (const stats::ConnectionView& c : p.connections) {
      auto path = static_cast<size_t>(c.path);
      if (path < std::size(sum.open)) ++sum.open[path];
    }
  }
  return sum;
}

std::string bucket_label(size_t i) {
  if (i == 0) return "under 1 ms";
  if (i + 1 == kBuckets) return u(uint64_t{1} << (i - 1)) + " ms or more";
  return u(uint64_t{1} << (i - 1)) + "-" + u(uint64_t{1} << i) + " ms";
}

std::string format_text(const Sum& sum, const std::string& since) {
  const TotalsView& t = sum.totals;
  std::string out = "live processes: " + u(sum.processes) + "; counts since " + since + "\n";
  out += "connections\n";
  out += count_line("decided rdma", t.decided_rdma);
  out += count_line("decided tcp", t.decided_tcp);
  out += count_line("upgraded to rdma", t.upgraded);
  out += count_line("not counted (slots exhausted)", t.slots_exhausted);
  out += "open now\n";
  using stats::SlotPath;
  for (SlotPath path : {SlotPath::kRdma, SlotPath::kSwitching, SlotPath::kBackOnTcp, SlotPath::kTcp}) {
    out += count_line(stats::to_string(path), sum.open[static_cast<size_t>(path)]);
  }
  out += "on tcp, by reason\n";
  for (size_t i = 0; i < kReasons; ++i) {
    // kNone is not a reason to be on TCP; shown only if a writer ever counted it.
    if (i == static_cast<size_t>(TcpReason::kNone) && t.on_tcp_by_reason[i] == 0) continue;
    out += count_line(stats::to_string(static_cast<TcpReason>(i)), t.on_tcp_by_reason[i]);
  }
  out += bytes_line("bytes", "in", "out");
  out += bytes_line("  tcp", bytes_text(t.tcp_bytes_in), bytes_text(t.tcp_bytes_out));
  out += bytes_line("  rdma", bytes_text(t.rdma_bytes_in), bytes_text(t.rdma_bytes_out));
  out += bytes_line("  rdma zero-copy", "-", bytes_text(t.zcopy_bytes_out));
  out += "descriptors\n";
  out += count_line("at the top of the application's range", t.descriptors_at_top);
  out += "setup time of the upgrades\n";
  bool any = false;
  for (size_t i = 0; i < kBuckets; ++i) {
    if (t.setup_ms_log2[i] == 0) continue;
    out += count_line(bucket_label(i), t.setup_ms_log2[i]);
    any = true;
  }
  if (!any) out += "  (none)\n";
  return out;
}

std::string format_json(const Sum& sum, const Baseline* baseline) {
  const TotalsView& t = sum.totals;
  std::string out = "{\"processes\":" + u(sum.processes) +
                    ",\"since_ms\":" + (baseline ? u(baseline->written_ms) : "null");
  out += ",\"connections\":{\"decided_rdma\":" + u(t.decided_rdma) + ",\"decided_tcp\":" + u(t.decided_tcp) +
         ",\"upgraded\":" + u(t.upgraded) + ",\"slots_exhausted\":" + u(t.slots_exhausted) + "}";
  out += ",\"descriptors_at_top\":" + u(t.descriptors_at_top);
  out += ",\"open\":{";
  for (size_t path = 1; path < std::size(sum.open); ++path) {
    out += (path > 1 ? "," : "") + json_string(stats::to_string(static_cast<stats::SlotPath>(path))) + ":" +
           u(sum.open[path]);
  }
  out += "},\"on_tcp_by_reason\":{";
  for (size_t i = 0; i < kReasons; ++i) {
    out += (i > 0 ? "," : "") + json_string(stats::to_string(static_cast<TcpReason>(i))) + ":" +
           u(t.on_tcp_by_reason[i]);
  }
  out += "},\"bytes\":{\"tcp_in\":" + u(t.tcp_bytes_in) + ",\"tcp_out\":" + u(t.tcp_bytes_out) +
         ",\"rdma_in\":" + u(t.rdma_bytes_in) + ",\"rdma_out\":" + u(t.rdma_bytes_out) +
         ",\"zcopy_out\":" + u(t.zcopy_bytes_out) + "},\"setup_ms\":[";
  bool first = true;
  for (size_t i = 0; i < kBuckets; ++i) {
    if (t.setup_ms_log2[i] == 0) continue;
    std::string from = i == 0 ? "0" : u(uint64_t{1} << (i - 1));
    std::string to = i + 1 == kBuckets ? "null" : u(uint64_t{1} << i);
    out += (first ? "" : ",") + std::string("{\"from\":") + from + ",\"to\":" + to +
           ",\"count\":" + u(t.setup_ms_log2[i]) + "}";
    first = false;
  }
  return out + "]}";
}

}  // namespace tcp2rdma::tools::stats_view
