#include "connection_table.h"

#include <algorithm>
#include <cstdio>
#include <string_view>

#include "text_format.h"

namespace tcp2rdma::tools::stats_view {
namespace {

using stats::ConnectionView;
using stats::ProcessView;
using stats::SlotPath;

// A program names itself (prctl, argv[0]) and a reason quotes errors: neither may move the cursor of
// the terminal that shows them.
std::string printable(const std::string& text) {
  std::string out = text;
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return out.empty() ? "-" : out;
}

bool on_tcp(const ConnectionView& c) { return c.path == SlotPath::kTcp || c.path == SlotPath::kBackOnTcp; }

uint64_t age_ms(const ConnectionView& c, uint64_t now_ms) { return now_ms > c.opened_ms ? now_ms - c.opened_ms : 0; }

struct Column {
  const char* title;
  bool right;  // numbers align right
};

constexpr Column kColumns[] = {
    {"PID", true},       {"PROGRAM", false}, {"FD", true},      {"ROLE", false},    {"LOCAL", false},
    {"REMOTE", false},   {"RULE", false},    {"PATH", false},   {"RDMA-IN", true},  {"RDMA-OUT", true},
    {"TCP-IN", true},    {"TCP-OUT", true},  {"RINGS", true},   {"AGE", true},      {"REASON", false},
};
constexpr size_t kReasonColumn = std::size(kColumns) - 1;

std::vector<std::string> row_of(const ProcessView& p, const ConnectionView& c, uint64_t now_ms) {
  return {std::to_string(p.pid),
          printable(p.program),
          std::to_string(c.fd),
          c.client ? "client" : "server",
          c.local,
          c.remote,
          printable(c.rule),
          stats::to_string(c.path),
          format_bytes_short(c.rdma_bytes_in),
          format_bytes_short(c.rdma_bytes_out),
          format_bytes_short(c.tcp_bytes_in),
          format_bytes_short(c.tcp_bytes_out),
          format_rings(c.ring_kib, c.peer_ring_kib),
          format_age(age_ms(c, now_ms)),
          on_tcp(c) ? printable(c.reason_text) : ""};
}

std::string field(const char* name, uint64_t value) { return std::string("\"") + name + "\":" + std::to_string(value); }
std::string field(const char* name, const std::string& value) {
  return std::string("\"") + name + "\":" + json_string(value);
}

std::string connection_json(const ConnectionView& c, uint64_t now_ms) {
  std::vector<std::string> fields = {
      field("slot", static_cast<uint64_t>(c.slot)),
      "\"fd\":" + std::to_string(c.fd),
      field("role", std::string(c.client ? "client" : "server")),
      field("local", c.local),
      field("remote", c.remote),
      field("rule", c.rule),
      field("path", std::string(stats::to_string(c.path))),
      field("reason", std::string(stats::to_string(c.reason))),
      field("reason_text", c.reason_text),
      field("opened_ms", c.opened_ms),
      field("age_ms", age_ms(c, now_ms)),
      field("setup_ms", c.setup_ms),
      field("switch_ms", c.switch_ms),
      field("ring_kib", c.ring_kib),
      field("peer_ring_kib", c.peer_ring_kib),
      field("rdma_bytes_in", c.rdma_bytes_in),
      field("rdma_bytes_out", c.rdma_bytes_out),
      field("zcopy_bytes_out", c.zcopy_bytes_out),
      field("credit_stalls", c.credit_stalls),
      field("wakeups", c.wakeups),
      field("tcp_bytes_in", c.tcp_bytes_in),
      field("tcp_bytes_out", c.tcp_bytes_out),
  };
  std::string out = "{";
  for (size_t i = 0; i < fields.size(); ++i) out += (i > 0 ? "," : "") + fields[i];
  return out + "}";
}

}  // namespace

bool shown(const ConnectionView& connection, bool all) {
  return all || (connection.path != SlotPath::kTcp && connection.path != SlotPath::kFree);
}

std::string format_table(const std::vector<ProcessView>& processes, const TableOptions& options) {
  std::vector<std::vector<std::string>> rows;
  bool any_on_tcp = false;
  for (const ProcessView& p : processes) {
    for (const ConnectionView& c : p.connections) {
      if (!shown(c, options.all)) continue;
      rows.push_back(row_of(p, c, options.now_ms));
      any_on_tcp = any_on_tcp || on_tcp(c);
    }
  }
  size_t columns = any_on_tcp ? std::size(kColumns) : kReasonColumn;
  std::vector<size_t> width(columns);
  for (size_t i = 0; i < columns; ++i) width[i] = std::string_view(kColumns[i].title).size();
  for (const auto& row : rows) {
    for (size_t i = 0; i < columns; ++i) width[i] = std::max(width[i], row[i].size());
  }
  auto line = [&](auto cell) {
    std::string out;
    for (size_t i = 0; i < columns; ++i) {
      std::string text = cell(i);
      bool last = i + 1 == columns;
      size_t pad = width[i] - std::min(width[i], text.size());
      if (kColumns[i].right) out.append(pad, ' ');
      out += text;
      if (!kColumns[i].right && !last) out.append(pad, ' ');
      if (!last) out += "  ";
    }
    out.erase(out.find_last_not_of(' ') + 1);  // a row without a reason ends at its age
    return out + "\n";
  };
  std::string out = line([](size_t i) { return std::string(kColumns[i].title); });
  for (const auto& row : rows) out += line([&](size_t i) { return row[i]; });
  return out;
}

std::string format_json(const std::vector<ProcessView>& processes, const TableOptions& options) {
  std::string out = "{\"processes\":[";
  for (size_t i = 0; i < processes.size(); ++i) {
    const ProcessView& p = processes[i];
    out += (i > 0 ? ",{" : "{") + std::string("\"pid\":") + std::to_string(p.pid) + "," + field("program", p.program) +
           "," + field("start_time", p.start_time) + ",\"stale\":" + (p.stale ? "true" : "false") +
           ",\"connections\":[";
    bool first = true;
    for (const ConnectionView& c : p.connections) {
      if (!shown(c, options.all)) continue;
      out += (first ? "" : ",") + connection_json(c, options.now_ms);
      first = false;
    }
    out += "]}";
  }
  return out + "]}";
}

std::string format_age(uint64_t ms) {
  uint64_t s = ms / 1000;
  char text[48];
  auto u = [](uint64_t v) { return static_cast<unsigned long long>(v); };
  if (s < 60) {
    std::snprintf(text, sizeof text, "%llus", u(s));
  } else if (s < 3600) {
    std::snprintf(text, sizeof text, "%llum%02llus", u(s / 60), u(s % 60));
  } else if (s < 86400) {
    std::snprintf(text, sizeof text, "%lluh%02llum", u(s / 3600), u(s / 60 % 60));
  } else {
    std::snprintf(text, sizeof text, "%llud%02lluh", u(s / 86400), u(s / 3600 % 24));
  }
  return text;
}

std::string format_rings(uint32_t ring_kib, uint32_t peer_ring_kib) {
  if (ring_kib == 0 && peer_ring_kib == 0) return "-";
  auto size = [](uint32_t kib) {
    if (kib >= 1024 && kib % 1024 == 0) return std::to_string(kib / 1024) + "M";
    return std::to_string(kib) + "K";
  };
  return size(ring_kib) + "/" + size(peer_ring_kib);
}

}  // namespace tcp2rdma::tools::stats_view
