// One finding of `tcp2rdma doctor` and the two ways it is printed: a line for people, JSON for scripts.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "text_format.h"  // json_string, format_bytes: shared with the stats commands

namespace tcp2rdma::tools::doctor {

enum class Verdict { kOk, kWarn, kFail };

struct Check {
  std::string name;     // "devices", "ports", ...: stable, scripts match on it
  Verdict verdict = Verdict::kOk;
  std::string finding;  // what was seen, in one sentence
  std::string fix;      // what to do; empty unless the check failed
};

inline Check passed(std::string name, std::string finding) {
  return {std::move(name), Verdict::kOk, std::move(finding), {}};
}
inline Check warned(std::string name, std::string finding) {
  return {std::move(name), Verdict::kWarn, std::move(finding), {}};
}
inline Check failed(std::string name, std::string finding, std::string fix) {
  return {std::move(name), Verdict::kFail, std::move(finding), std::move(fix)};
}

// "ok    devices: rxe0 (1 port)", "FAIL  memlock: ... -- fix: ...", without a newline.
std::string format_line(const Check& check);

// {"checks":[{"name":..,"status":"ok|warn|fail","finding":..,"fix":..}],"ok":bool}; "fix" is null when
// there is none.
std::string format_json(const std::vector<Check>& checks);

// The exit status the checks earn: a warning alone does not fail the machine.
bool none_failed(const std::vector<Check>& checks);

}  // namespace tcp2rdma::tools::doctor
