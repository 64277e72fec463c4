// tcp2rdma stats [--json] [--reset]: the counters of every live process under the module summed
// (docs/stats.md): connections decided and upgraded, why those on TCP are, bytes by path, setup
// times. --reset prints them, then makes the current counts the baseline later runs subtract. Exit
// status 0; 1 when the baseline cannot be written; 2 for bad usage.
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "commands.h"
#include "stats_view/baseline.h"
#include "stats_view/segments.h"
#include "stats_view/totals.h"

namespace tcp2rdma::tools {
namespace {

constexpr char kCommand[] = "tcp2rdma stats";
constexpr char kUsage[] =
    "usage: tcp2rdma stats [--json] [--reset]\n"
    "  totals over the live processes under the module: connections, reasons for TCP, bytes by path,\n"
    "  setup times; --reset prints them, then counts from zero again (for this user)\n";

int usage(const std::string& problem) {
  std::fprintf(stderr, "%s: %s\n%s", kCommand, problem.c_str(), kUsage);
  return 2;
}

}  // namespace

int stats_command(std::span<char*> args) {
  bool json = false, reset = false;
  for (std::string_view flag : args) {
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (flag == "--json") {
      json = true;
    } else if (flag == "--reset") {
      reset = true;
    } else {
      return usage("unknown argument '" + std::string(flag) + "'");
    }
  }
  stats_view::Segments segments = stats_view::read_segments();
  std::string path = stats_view::baseline_path();
  std::string problem;
  std::optional<stats_view::Baseline> baseline = stats_view::read_baseline(path, &problem);
  if (!problem.empty()) std::fprintf(stderr, "%s: ignoring the baseline: %s\n", kCommand, problem.c_str());
  const stats_view::Baseline* since = baseline ? &*baseline : nullptr;
  stats_view::Sum sum = stats_view::sum_live(segments.live, since);
  if (json) {
    std::printf("%s\n", stats_view::format_json(sum, since).c_str());
  } else {
    std::string start = since ? "the reset of " + stats_view::format_time(since->written_ms) : "each process's start";
    std::fputs(stats_view::format_text(sum, start).c_str(), stdout);
  }
  std::fflush(stdout);
  stats_view::print_notices(kCommand, segments);
  if (!reset) return 0;
  if (!stats_view::write_baseline(path, stats_view::format_baseline(segments.live, stats_view::now_ms()), &problem)) {
    std::fprintf(stderr, "%s: --reset: %s\n", kCommand, problem.c_str());
    return 1;
  }
  std::fprintf(json ? stderr : stdout, "reset: later counts start from now (baseline %s)\n", path.c_str());
  return 0;
}

}  // namespace tcp2rdma::tools
