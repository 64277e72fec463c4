#include "report.h"

#include <cstdint>
#include <cstdio>
#include <iterator>

namespace tcp2rdma::tools::doctor {
namespace {

const char* status_word(Verdict verdict) {
  switch (verdict) {
    case Verdict::kOk: return "ok";
    case Verdict::kWarn: return "warn";
    case Verdict::kFail: return "fail";
  }
  return "fail";
}

// JSON wants every control character escaped; findings quote file contents and dlerror() text, which
// can hold anything.
std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      out += escaped;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace

std::string format_line(const Check& check) {
  const char* label = check.verdict == Verdict::kOk ? "ok    " : check.verdict == Verdict::kWarn ? "warn  " : "FAIL  ";
  std::string line = label + check.name + ": " + check.finding;
  if (check.verdict == Verdict::kFail && !check.fix.empty()) line += " -- fix: " + check.fix;
  return line;
}

std::string format_json(const std::vector<Check>& checks) {
  std::string out = "{\"checks\":[";
  for (size_t i = 0; i < checks.size(); ++i) {
    const Check& c = checks[i];
    if (i > 0) out += ',';
    out += "{\"name\":" + json_string(c.name) + ",\"status\":\"" + status_word(c.verdict) +
           "\",\"finding\":" + json_string(c.finding) + ",\"fix\":" + (c.fix.empty() ? "null" : json_string(c.fix)) +
           "}";
  }
  out += "],\"ok\":";
  out += none_failed(checks) ? "true" : "false";
  return out + "}";
}

bool none_failed(const std::vector<Check>& checks) {
  for (const Check& c : checks) {
    if (c.verdict == Verdict::kFail) return false;
  }
  return true;
}

std::string format_bytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  size_t unit = 0;
  uint64_t scale = 1;
  while (unit + 1 < std::size(kUnits) && bytes >= scale * 1024) {
    scale *= 1024;
    ++unit;
  }
  char text[32];
  if (bytes % scale == 0) {
    std::snprintf(text, sizeof text, "%llu %s", static_cast<unsigned long long>(bytes / scale), kUnits[unit]);
  } else {
    std::snprintf(text, sizeof text, "%.1f %s", static_cast<double>(bytes) / static_cast<double>(scale), kUnits[unit]);
  }
  return text;
}

}  // namespace tcp2rdma::tools::doctor
