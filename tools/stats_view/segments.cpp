#include "segments.h"

#include <time.h>

#include <cstdio>
#include <ctime>

namespace tcp2rdma::tools::stats_view {

Segments read_segments() {
  Segments segments;
  for (stats::ProcessView& p : stats::read_all("", &segments.skipped)) {
    (p.stale ? segments.stale : segments.live).push_back(std::move(p));
  }
  return segments;
}

void print_notices(const char* command, const Segments& segments) {
  for (const std::string& why : segments.skipped) std::fprintf(stderr, "%s: skipped %s\n", command, why.c_str());
  size_t n = segments.stale.size();
  if (n == 0) return;
  std::fprintf(stderr, "%s: %zu stale segment%s (process%s gone): remove with tcp2rdma stat --clean\n", command, n,
               n == 1 ? "" : "s", n == 1 ? "" : "es");
}

uint64_t now_ms() {
  timespec t{};
  clock_gettime(CLOCK_REALTIME, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1000 + static_cast<uint64_t>(t.tv_nsec) / 1000000;
}

std::string format_time(uint64_t ms) {
  time_t seconds = static_cast<time_t>(ms / 1000);
  tm local{};
  char text[32] = "";
  if (localtime_r(&seconds, &local) != nullptr) std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &local);
  return text;
}

}  // namespace tcp2rdma::tools::stats_view
