// tcp2rdma stat [--pid P] [--json] [--watch S] [-a|--all] | --clean: the connections of the processes
// under the module, one row each, read from their stats segments (docs/stats.md). Exit status 0; 1
// when --pid names a process without a segment (or --clean could not remove one); 2 for bad usage.
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "commands.h"
#include "stats/stats_writer.h"  // segment_directory()
#include "stats_view/connection_table.h"
#include "stats_view/kernel_tcp.h"
#include "stats_view/segments.h"

namespace tcp2rdma::tools {
namespace {

using stats::ProcessView;
using stats_view::Segments;

constexpr char kCommand[] = "tcp2rdma stat";
constexpr char kUsage[] =
    "usage: tcp2rdma stat [--pid P] [--json] [--watch S] [-a|--all]\n"
    "       tcp2rdma stat --clean\n"
    "  one row per connection of the processes under the module (or of pid P): those on RDMA, switching\n"
    "  or back on TCP; -a also those on TCP, with the reason. --watch redraws every S seconds;\n"
    "  --clean removes the segments of processes that are gone\n";

struct Options {
  pid_t pid = 0;
  bool json = false;
  bool all = false;
  double watch_s = 0;  // 0: once
  bool clean = false;
};

int usage(const std::string& problem) {
  std::fprintf(stderr, "%s: %s\n%s", kCommand, problem.c_str(), kUsage);
  return 2;
}

// nullopt when the command is to run; else the exit status it ends with (--help, bad usage).
std::optional<int> parse(std::span<char*> args, Options* options) {
  for (size_t i = 0; i < args.size(); ++i) {
    std::string_view flag = args[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (flag == "--json" || flag == "-a" || flag == "--all" || flag == "--clean") {
      if (flag == "--json") options->json = true;
      if (flag == "-a" || flag == "--all") options->all = true;
      if (flag == "--clean") options->clean = true;
      continue;
    }
    if (flag != "--pid" && flag != "--watch") return usage("unknown argument '" + std::string(flag) + "'");
    if (i + 1 >= args.size()) return usage("missing value after " + std::string(flag));
    std::string value = args[++i];
    char* end = nullptr;
    errno = 0;
    if (flag == "--pid") {
      long pid = std::strtol(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || errno != 0 || pid <= 0 || pid > INT32_MAX) {
        return usage("--pid wants a process id, not '" + value + "'");
      }
      options->pid = static_cast<pid_t>(pid);
    } else {
      double seconds = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !std::isfinite(seconds) || seconds < 0.1 || seconds > 86400) {
        return usage("--watch wants seconds between 0.1 and 86400, not '" + value + "'");
      }
      options->watch_s = seconds;
    }
  }
  if (options->clean && (options->pid != 0 || options->json || options->all || options->watch_s > 0)) {
    return usage("--clean takes no other option");
  }
  return std::nullopt;
}

// One look at the segments, printed. 1 when --pid names no segment.
int show(const Options& options) {
  Segments segments;
  if (options.pid != 0) {
    ProcessView p;
    if (!stats::read_process(options.pid, &p)) {
      std::fprintf(stderr,
                   "%s: pid %d has no stats segment in %s (not under the module, no connection decided yet, or "
                   "not readable by this user)\n",
                   kCommand, static_cast<int>(options.pid), stats::segment_directory());
      return 1;
    }
    // Asked for by its pid: shown even if stale, and said so.
    if (p.stale) std::fprintf(stderr, "%s: pid %d is gone: its segment is stale\n", kCommand, static_cast<int>(p.pid));
    segments.live.push_back(std::move(p));
  } else {
    segments = stats_view::read_segments();
  }
  stats_view::use_kernel_tcp_bytes(&segments.live);  // the kernel's counts for connections on TCP
  stats_view::TableOptions table{options.all, stats_view::now_ms()};
  std::string text = options.json ? stats_view::format_json(segments.live, table) + "\n"
                                   : stats_view::format_table(segments.live, table);
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
  if (options.pid == 0) stats_view::print_notices(kCommand, segments);
  if (options.pid == 0 && segments.live.empty() && !options.json) {
    std::fprintf(stderr, "%s: no process under the module has a stats segment in %s\n", kCommand,
                 stats::segment_directory());
  }
  if (!options.json && !options.all) {
    size_t hidden = 0;
    for (const ProcessView& p : segments.live) {
      for (const stats::ConnectionView& c : p.connections) hidden += stats_view::shown(c, false) ? 0 : 1;
    }
    if (hidden > 0) std::fprintf(stderr, "%s: %zu connection%s on TCP not shown (-a shows them)\n", kCommand, hidden,
                                 hidden == 1 ? "" : "s");
  }
  return 0;
}

int watch(const Options& options) {
  bool tty = ::isatty(STDOUT_FILENO) == 1;
  for (;;) {
    if (tty) {
      std::fputs("\x1b[H\x1b[2J", stdout);  // home, then clear: the table redrawn in place
    } else if (!options.json) {
      std::printf("--- %s\n", stats_view::format_time(stats_view::now_ms()).c_str());
    }
    if (int status = show(options); status != 0) return status;
    timespec rest{static_cast<time_t>(options.watch_s),
                  static_cast<long>((options.watch_s - std::floor(options.watch_s)) * 1e9)};
    while (nanosleep(&rest, &rest) != 0 && errno == EINTR) {
    }
  }
}

// Removes the stale segments this user owns (root: every one). Each is read once more just before:
// a process that took the pid meanwhile replaces the file with its own, which must stay.
int clean() {
  Segments segments = stats_view::read_segments();
  stats_view::print_notices(kCommand, Segments{{}, {}, segments.skipped});
  size_t removed = 0, foreign = 0;
  int status = 0;
  uid_t me = ::geteuid();
  for (const ProcessView& p : segments.stale) {
    if (me != 0 && p.owner != me) {
      ++foreign;
      continue;
    }
    ProcessView again;
    if (!stats::read_process(p.pid, &again) || !again.stale || again.start_time != p.start_time) continue;
    if (::unlink(p.path.c_str()) == 0) {
      ++removed;
    } else if (errno != ENOENT) {
      std::fprintf(stderr, "%s: cannot remove %s: %s\n", kCommand, p.path.c_str(), std::strerror(errno));
      status = 1;
    }
  }
  std::printf("removed %zu stale segment%s\n", removed, removed == 1 ? "" : "s");
  if (foreign > 0) {
    std::printf("left %zu stale segment%s of other users (their owners or root can remove them)\n", foreign,
                foreign == 1 ? "" : "s");
  }
  return status;
}

}  // namespace

int stat_command(std::span<char*> args) {
  Options options;
  if (std::optional<int> status = parse(args, &options)) return *status;
  if (options.clean) return clean();
  return options.watch_s > 0 ? watch(options) : show(options);
}

}  // namespace tcp2rdma::tools
