// stream_bench: the transport's own throughput and latency, for integration/bench-transport.sh.
//   stream_bench server PORT MODE SIZE COUNT
//   stream_bench client ADDR PORT MODE SIZE COUNT
// MODE bw:  the client writes COUNT messages of SIZE bytes from one buffer; the server reads them all
//           and answers one byte; the client prints MB/s (10^6 bytes per second) over that interval.
// MODE lat: COUNT round trips of SIZE bytes; the client prints half the round trip in microseconds
//           (average and median), as perftest's *_lat tools do.
// Environment: BENCH_ZCOPY_THRESHOLD and BENCH_BUSY_POLL_US override the stream's defaults.
#include <x86intrin.h>

#include <algorithm>
#include <string_view>
#include <vector>

#include "peer_util.h"

using namespace peer_util;

namespace {

using Clock = std::chrono::steady_clock;

bool write_all(RdmaStream& s, const uint8_t* p, size_t n) {
  iovec iov{const_cast<uint8_t*>(p), n};
  size_t done = 0;
  return s.write(&iov, 1, 0, &done) == Status::kOk && done == n;
}

bool read_all(RdmaStream& s, uint8_t* p, size_t n) {
  iovec iov{p, n};
  size_t done = 0;
  return s.read(&iov, 1, tcp2rdma::transport::kWaitAll, &done) == Status::kOk && done == n;
}

int server(RdmaStream& s, std::string_view mode, size_t size, uint64_t count) {
  std::vector<uint8_t> buf(std::max<size_t>(size, 1 << 20));
  if (mode == "bw") {
    uint64_t left = size * count;
    while (left > 0) {
      iovec iov{buf.data(), std::min<uint64_t>(left, buf.size())};
      size_t done = 0;
      if (s.read(&iov, 1, 0, &done) != Status::kOk || done == 0) return 1;
      left -= done;
    }
    return write_all(s, buf.data(), 1) ? 0 : 1;
  }
  for (uint64_t i = 0; i < count; ++i) {
    if (!read_all(s, buf.data(), size) || !write_all(s, buf.data(), size)) return 1;
  }
  return 0;
}

int client(RdmaStream& s, std::string_view mode, size_t size, uint64_t count) {
  std::vector<uint8_t> buf(std::max<size_t>(size, 1));
  fill(buf.data(), buf.size(), 1, 0);
  if (mode == "bw") {
    auto start = Clock::now();
    for (uint64_t i = 0; i < count; ++i) {
      if (!write_all(s, buf.data(), size)) return 1;
    }
    if (!read_all(s, buf.data(), 1)) return 1;
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    auto c = s.counters();
    std::printf("stream_bench bw size %zu count %llu: %.1f MB/s (zero-copy bytes %llu, credit stalls %llu)\n", size,
                ull(count), static_cast<double>(size) * static_cast<double>(count) / seconds / 1e6, ull(c.zcopy_bytes),
                ull(c.credit_stalls));
    return 0;
  }
  // Timed with the time-stamp counter, as perftest does: in a guest without a vDSO clock,
  // steady_clock is a system call that would add itself to every round trip.
  std::vector<uint64_t> cycles(count);
  auto start = Clock::now();
  uint64_t tsc_start = __rdtsc();
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t t0 = __rdtsc();
    if (!write_all(s, buf.data(), size) || !read_all(s, buf.data(), size)) return 1;
    cycles[i] = __rdtsc() - t0;
  }
  double us_per_cycle = std::chrono::duration<double, std::micro>(Clock::now() - start).count() /
                        static_cast<double>(__rdtsc() - tsc_start);
  double sum = 0;
  for (uint64_t c : cycles) sum += static_cast<double>(c);
  std::sort(cycles.begin(), cycles.end());
  std::printf("stream_bench lat size %zu count %llu: average %.2f us, median %.2f us\n", size, ull(count),
              sum / static_cast<double>(count) * us_per_cycle / 2,
              static_cast<double>(cycles[cycles.size() / 2]) * us_per_cycle / 2);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string_view role = argc > 1 ? argv[1] : "";
  StreamOptions options;
  if (const char* t = std::getenv("BENCH_ZCOPY_THRESHOLD")) options.zcopy_threshold = std::strtoull(t, nullptr, 10);
  if (const char* b = std::getenv("BENCH_BUSY_POLL_US")) options.busy_poll_us = std::atoi(b);
  // on, off (a spin that never gives the CPU away), or unset: on a software device only.
  if (const char* y = std::getenv("BENCH_BUSY_POLL_YIELD"); y != nullptr && *y != '\0') {
    options.busy_poll_yield = std::string_view(y) == "on" ? tcp2rdma::transport::SpinYield::kAlways
                                                                  : tcp2rdma::transport::SpinYield::kNever;
  }
  if (argc == 6 && role == "server") {
    std::unique_ptr<StreamListener> listener = listen_on(argv[2], options);
    std::unique_ptr<RdmaStream> s = listener ? accept_one(*listener) : nullptr;
    if (!s) return 1;
    int rc = server(*s, argv[3], std::strtoull(argv[4], nullptr, 10), std::strtoull(argv[5], nullptr, 10));
    s->close();
    return rc;
  }
  if (argc == 7 && role == "client") {
    std::unique_ptr<RdmaStream> s = connect_to(argv[2], argv[3], options);
    if (!s) return 1;
    int rc = client(*s, argv[4], std::strtoull(argv[5], nullptr, 10), std::strtoull(argv[6], nullptr, 10));
    s->close();
    return rc;
  }
  std::fprintf(stderr, "usage: see the comment at the top of stream_bench.cpp\n");
  return 2;
}
