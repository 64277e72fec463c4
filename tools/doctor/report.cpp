#include "report.h"

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

}  // namespace tcp2rdma::tools::doctor
