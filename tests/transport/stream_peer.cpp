// stream_peer: both ends of byte-exact tests of RdmaStream, run in the Soft-RoCE VM.
//   stream_peer server PORT SEED BYTES ANSWER [slow|lazy|write-first]
//       accepts one stream; checks that exactly BYTES of stream SEED arrive, then the end; meanwhile
//       sends ANSWER bytes of stream SEED+1 in writes of random sizes. "slow": reads in small pieces
//       with pauses, so the writer runs out of credits again and again. "lazy": reads the first 32
//       bytes, then nothing for a second (the room they freed is not advertised meanwhile).
//       "write-first": one thread writes all of ANSWER, shuts down, and only then reads.
//   stream_peer client ADDR PORT SEED BYTES ANSWER [PATTERN]
//       the other end; checks ANSWER bytes of stream SEED+1 while it sends BYTES. PATTERN:
//         random          writes of random sizes from 1 B to 8 MiB (default)
//         zcopy-edge      writes just below, at and above the zero-copy threshold; asserts exactly the
//                         ones at or above it went by zero-copy (all but their copied tails)
//         remap           a buffer sent twice (the second time a proven cache hit), unmapped, mapped
//                         again at the same address with other bytes, sent again; then the same with
//                         malloc/free. BYTES must be 11534336.
//         close-in-flight one write of BYTES, then close at once; the peer still reads every byte
//         pauses          random writes in three bursts of BYTES/3, each after the first after a
//                         pause of 2 s (the reader's grown ring goes back to its first size while idle)
//         write-first     one thread writes all of BYTES, shuts down, and only then reads (against a
//                         write-first server, each side's message larger than both rings: neither
//                         reads before its write returns, which only the spill lets happen)
//         exact-fit       32 bytes, then (300 ms later) the rest in one write: against a lazy server
//                         with a first ring of BYTES - 32, the write waits only for the room the
//                         server read and had not advertised, which must not grow its ring
//   stream_peer server-until-reset PORT SEED     reads and checks until the stream fails; exit 0 only
//                                                 if it failed as a reset (never a clean end of stream)
//   stream_peer client-forever ADDR PORT SEED    says "client: connected" on standard error, then
//                                                 writes until killed
//   stream_peer server-expect-violation PORT     exit 0 only if the stream failed as a protocol
//                                                 violation (tests/transport/hostile_peer); with
//                                                 PEER_HOLD_FAILED_MS, holds the failed stream that
//                                                 long before it exits
//   stream_peer server-isolation PORT            accepts two streams (A, then B) of one client and
//                                                 exits 0 only if A carried exactly "through A,
//                                                 untouched" and then its end (hostile_peer cross-rkey
//                                                 wrote into A's ring through B meanwhile)
//   stream_peer server-zcopy-abort PORT          accepts a stream from hostile_peer silent, writes
//                                                 8 MiB by zero-copy in one call, which a reset stops
//                                                 (abort from another thread) while its writes wait
//                                                 for acknowledgements; exits 0 only if, when write
//                                                 returned, no zero-copy write was in flight (the
//                                                 caller's buffer is its own again)
//   stream_peer server-owed-close PORT           accepts a stream from hostile_peer starve, writes
//                                                 until the peer's receives run out, then shuts down
//                                                 and closes: exits 0 only if its end was owed (no
//                                                 receive left for it), shutdown returned at once and
//                                                 close by its deadline, with a failure (the peer,
//                                                 which keeps no receive for the release either,
//                                                 never had the end: a reset, never a clean end)
//   stream_peer server-answer-after-exit PORT    accepts a stream, reads until its end (then says so in
//                                                 $T2R_WORK/read-end), waits for $T2R_WORK/client-exited
//                                                 and a second more, and answers: exits 0 only if the
//                                                 answer failed as the path's failure (the client shut
//                                                 its side down and its process ended without a close:
//                                                 a disconnect without a release, never the end of a
//                                                 peer that only shut down its side and may still read)
//   stream_peer client-shut-exit ADDR PORT       writes "request", shuts its side down, and once the
//                                                 server read the end, ends its process without a close
// Environment: PEER_RING_LOG2 and PEER_DEPTH set the ring size and receive queue depth (default 16
// and 8: small, so that credits run out often); PEER_EXPECT_STALLS=1 makes the client fail unless it
// ran out of credits at least once. PEER_START_RING_LOG2 starts the rings at that size, growing to
// PEER_RING_LOG2; PEER_EXPECT_GROWTH=1 makes server and client fail unless their ring grew;
// PEER_EXPECT_SHRINK=1 makes the server fail unless its ring grew, shrank while idle and grew again;
// PEER_EXPECT_NO_GROWTH=1 makes it fail if its ring grew. Both ends say how many of the peer's bytes
// they moved out of their ring while they waited to write (spill_limit).
// PEER_SPILL_LIMIT sets StreamOptions::spill_limit (0: never spill).
// PEER_KEEPALIVE_MS sets the keepalive interval (also the period of the looks that shrink an idle
// ring). Exit 0 only when every byte matched.
#include <sys/mman.h>

#include <atomic>
#include <string>
#include <string_view>
#include <vector>

#include "peer_util.h"

using namespace peer_util;
using tcp2rdma::transport::kNonBlocking;
using tcp2rdma::transport::StreamCounters;
using tcp2rdma::transport::Deadline;

namespace {

size_t random_size(std::mt19937_64& rng, size_t max) {
  size_t n = 0;
  switch (rng() % 6) {
    case 0: n = 1 + rng() % 16; break;
    case 1: n = 1 + rng() % 4096; break;
    case 2: n = 1 + rng() % 65536; break;
    case 3: n = 60000 + rng() % 10000; break;  // around the zero-copy threshold
    case 4: n = 1 + rng() % (1 << 20); break;
    default: n = 1 + rng() % (8 << 20); break;
  }
  return std::min(n, max);
}

// Writes one piece of the stream from `buf` (already filled), all of it.
bool write_all(RdmaStream& s, const uint8_t* buf, size_t n, uint64_t pos) {
  iovec iov{const_cast<uint8_t*>(buf), n};
  size_t done = 0;
  if (Status st = s.write(&iov, 1, 0, &done); st != Status::kOk || done != n) {
    std::fprintf(stderr, "write of %zu at %llu: %s (took %zu)\n", n, ull(pos), to_string(st), done);
    return false;
  }
  return true;
}

// Random writes in three bursts with a pause before the second and the third: longer than two of the
// reader's periodic looks (PEER_KEEPALIVE_MS), so that its grown ring goes back while we pause.
bool send_with_pauses(RdmaStream& s, uint64_t seed, uint64_t bytes, std::mt19937_64 rng) {
  std::vector<uint8_t> buf(8 << 20);
  uint64_t pos = 0;
  for (int burst = 0; burst < 3; ++burst) {
    if (burst > 0) std::this_thread::sleep_for(std::chrono::seconds(2));
    for (uint64_t end = bytes * (burst + 1) / 3; pos < end;) {
      size_t n = random_size(rng, end - pos);
      fill(buf.data(), n, seed, pos);
      if (!write_all(s, buf.data(), n, pos)) return false;
      pos += n;
    }
  }
  return true;
}

// 32 bytes, then the rest in one write (see "exact-fit" at the top).
bool send_exact_fit(RdmaStream& s, uint64_t seed, uint64_t bytes) {
  std::vector<uint8_t> buf(bytes);
  fill(buf.data(), bytes, seed, 0);
  if (bytes <= 32 || !write_all(s, buf.data(), 32, 0)) return false;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  return write_all(s, buf.data() + 32, bytes - 32, 32);
}

bool send_random(RdmaStream& s, uint64_t seed, uint64_t bytes, std::mt19937_64 rng) {
  std::vector<uint8_t> buf(8 << 20);
  for (uint64_t pos = 0; pos < bytes;) {
    size_t n = random_size(rng, bytes - pos);
    fill(buf.data(), n, seed, pos);
    if (!write_all(s, buf.data(), n, pos)) return false;
    pos += n;
  }
  return true;
}

// Reads exactly `bytes` of stream `seed` in reads of random sizes, then requires the end of stream.
bool receive_checked(RdmaStream& s, uint64_t seed, uint64_t bytes, std::mt19937_64 rng, bool slow, const char* who,
                     bool lazy = false) {
  std::vector<uint8_t> buf(8 << 20);
  uint64_t pos = 0;
  for (;;) {
    if (lazy && pos == 32) std::this_thread::sleep_for(std::chrono::seconds(1));
    size_t want = slow ? 1 + rng() % 3000 : random_size(rng, buf.size());
    if (lazy && pos < 32) want = 32 - pos;
    iovec iov{buf.data(), want};
    size_t done = 0;
    Status st = s.read(&iov, 1, 0, &done);
    if (st != Status::kOk) {
      std::fprintf(stderr, "%s: read at %llu: %s\n", who, ull(pos), to_string(st));
      return false;
    }
    if (done == 0) break;
    if (size_t bad = first_difference(buf.data(), done, seed, pos); bad != done) {
      std::fprintf(stderr, "%s: byte %llu differs\n", who, ull(pos + bad));
      return false;
    }
    pos += done;
    if (slow) std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  if (pos != bytes) std::fprintf(stderr, "%s: the stream ended after %llu bytes, not %llu\n", who, ull(pos), ull(bytes));
  return pos == bytes;
}

void print_counters(const char* who, bool ok, const StreamCounters& c) {
  std::printf("%s: %s; sent %llu (zero-copy %llu, fallbacks %llu, inline messages %llu), received %llu, credit stalls "
              "%llu, wakeups %llu, mailbox updates %llu, completions %llu, keepalives %llu; registrations %llu, cache hits %llu, "
              "stale %llu, unverifiable %llu\n",
              who, ok ? "ok" : "FAILED", ull(c.bytes_sent), ull(c.zcopy_bytes), ull(c.zcopy_fallbacks),
              ull(c.inline_messages), ull(c.bytes_received), ull(c.credit_stalls), ull(c.wakeups_received),
              ull(c.mailbox_updates_sent), ull(c.completions), ull(c.keepalives_sent), ull(c.registrations.registrations),
              ull(c.registrations.hits), ull(c.registrations.stale), ull(c.registrations.unverifiable));
}

// Writes of sizes around the threshold, each from its own buffer; exactly those at or above it must go
// by zero-copy.
bool send_zcopy_edge(RdmaStream& s, uint64_t seed, uint64_t bytes, const StreamOptions& s_options) {
  size_t threshold = s_options.zcopy_threshold;
  const size_t sizes[] = {threshold - 1, threshold, threshold + 1, 1, threshold - 1, 2 * threshold, 3 * threshold + 7};
  std::vector<uint8_t> buf(4 * threshold);
  uint64_t pos = 0, expect_zcopy = 0;
  for (size_t i = 0; pos < bytes; ++i) {
    size_t n = std::min<uint64_t>(sizes[i % std::size(sizes)], bytes - pos);
    fill(buf.data(), n, seed, pos);
    if (!write_all(s, buf.data(), n, pos)) return false;
    expect_zcopy += tcp2rdma::transport::zero_copy_part(n, s_options);
    pos += n;
  }
  StreamCounters c = s.counters();
  std::printf("client: zero-copy bytes %llu, expected %llu\n", ull(c.zcopy_bytes), ull(expect_zcopy));
  return c.zcopy_bytes == expect_zcopy && expect_zcopy > 0;
}

// The registration cache must never send what an old mapping held at a reused address.
bool send_remap(RdmaStream& s, uint64_t seed, uint64_t bytes) {
  constexpr size_t kMap = 1 << 20, kMalloc = 4 << 20;
  if (bytes != 3 * kMap + 2 * kMalloc) {
    std::fprintf(stderr, "remap: BYTES must be %zu\n", 3 * kMap + 2 * kMalloc);
    return false;
  }
  uint64_t pos = 0;
  auto send = [&](uint8_t* p, size_t n) {
    fill(p, n, seed, pos);
    bool ok = write_all(s, p, n, pos);
    pos += n;
    return ok;
  };
  void* map = mmap(nullptr, kMap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED || !send(static_cast<uint8_t*>(map), kMap) || !send(static_cast<uint8_t*>(map), kMap)) return false;
  uint64_t hits = s.counters().registrations.hits;
  munmap(map, kMap);
  void* again = mmap(map, kMap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (again != map) {
    std::fprintf(stderr, "remap: could not map the same address again\n");
    return false;
  }
  if (!send(static_cast<uint8_t*>(again), kMap)) return false;
  munmap(again, kMap);
  uint64_t stale = s.counters().registrations.stale;
  auto* first = static_cast<uint8_t*>(std::malloc(kMalloc));
  if (first == nullptr || !send(first, kMalloc)) return false;
  std::free(first);
  auto* second = static_cast<uint8_t*>(std::malloc(kMalloc));
  bool same = second == first;
  if (second == nullptr || !send(second, kMalloc)) return false;
  std::free(second);
  StreamCounters c = s.counters();
  std::printf("client: remap: cache hit on the second send %s, stale entry caught after the remap %s, malloc gave "
              "the same address again: %s\n",
              hits >= 1 ? "yes" : "NO", stale >= 1 ? "yes" : "NO", same ? "yes" : "no");
  // Without frame numbers (no CAP_SYS_ADMIN) nothing is cached: every send registers afresh.
  if (c.registrations.unverifiable > 0) return c.registrations.hits == 0;
  return hits >= 1 && stale >= 1;
}

bool send_close_in_flight(RdmaStream& s, uint64_t seed, uint64_t bytes) {
  std::vector<uint8_t> buf(bytes);
  fill(buf.data(), bytes, seed, 0);
  if (!write_all(s, buf.data(), bytes, 0)) return false;
  Status st = s.close();  // at once: most of it is still in flight or unread at the peer
  std::printf("client: wrote %llu bytes and closed: %s\n", ull(bytes), to_string(st));
  return st == Status::kOk;
}

StreamOptions test_options() {
  StreamOptions options;
  const char* ring = std::getenv("PEER_RING_LOG2");
  const char* depth = std::getenv("PEER_DEPTH");
  options.ring_size_log2 = ring ? static_cast<uint32_t>(std::atoi(ring)) : 16;
  options.recv_queue_depth = depth ? static_cast<uint16_t>(std::atoi(depth)) : 8;
  if (const char* keepalive = std::getenv("PEER_KEEPALIVE_MS")) options.keepalive_ms = std::atoi(keepalive);
  if (const char* spill = std::getenv("PEER_SPILL_LIMIT")) options.spill_limit = std::strtoull(spill, nullptr, 10);
  if (const char* start = std::getenv("PEER_START_RING_LOG2")) {
    options.start_ring_size_log2 = static_cast<uint32_t>(std::atoi(start));
  }
  return options;
}

// Says how the stream's rings grew; with PEER_EXPECT_GROWTH=1, false unless ours grew (the peer's
// bytes filled it).
bool rings_as_expected(const char* who, const RdmaStream& s) {
  std::printf("%s: our ring grew %llu times and shrank %llu times (now %llu KiB), the peer's is %llu KiB\n", who,
              ull(s.rings_grown()), ull(s.rings_shrunk()), ull(s.ring_size() >> 10), ull(s.peer_ring_size() >> 10));
  if (std::getenv("PEER_EXPECT_GROWTH") != nullptr && s.rings_grown() == 0) {
    std::fprintf(stderr, "%s: its ring never grew\n", who);
    return false;
  }
  return true;
}

// Says how many of the peer's bytes left our ring while we waited to write (which of two writers
// that both wait spills depends on timing: a script adds both ends' figures).
void say_spilled(const char* who, const RdmaStream& s) {
  std::printf("%s: spilled %llu bytes of the peer's while waiting to write\n", who, ull(s.counters().bytes_spilled));
}

// Reads and checks until the stream fails with `expected` (never a clean end of stream).
int read_until_failure(RdmaStream& s, uint64_t seed, Status expected, bool check) {
  std::vector<uint8_t> buf(65536);
  int ends = 0;
  for (uint64_t pos = 0;;) {
    iovec iov{buf.data(), buf.size()};
    size_t done = 0;
    Status st = s.read(&iov, 1, 0, &done);
    if (st == Status::kOk && done == 0 && expected == Status::kProtocolError && ++ends < 30) {
      // An end of stream followed by more messages must still turn into a violation: look again.
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    if (st != Status::kOk || done == 0) {
      std::printf("server: after %llu good bytes the stream ended with: %s\n", ull(pos),
                  st == Status::kOk ? "a clean end of stream" : to_string(st));
      return st == expected ? 0 : 1;
    }
    if (check && first_difference(buf.data(), done, seed, pos) != done) {
      std::printf("server: a byte differs near %llu\n", ull(pos));
      return 1;
    }
    pos += done;
  }
}

int run_server(int argc, char** argv, const StreamOptions& options) {
  std::unique_ptr<StreamListener> listener = listen_on(argv[2], options);
  if (!listener) return 1;
  std::unique_ptr<RdmaStream> s = accept_one(*listener);
  if (!s) return 1;
  uint64_t seed = std::strtoull(argv[3], nullptr, 10), bytes = std::strtoull(argv[4], nullptr, 10);
  uint64_t answer = std::strtoull(argv[5], nullptr, 10);
  bool slow = argc > 6 && std::string_view(argv[6]) == "slow";
  bool lazy = argc > 6 && std::string_view(argv[6]) == "lazy";
  bool write_first = argc > 6 && std::string_view(argv[6]) == "write-first";
  std::atomic<bool> sent{true};
  auto send = [&] {
    sent = send_random(*s, seed + 1, answer, std::mt19937_64(seed * 7)) && s->shutdown_write() == Status::kOk;
  };
  std::thread writer;
  if (write_first) send();
  else writer = std::thread(send);
  bool received = receive_checked(*s, seed, bytes, std::mt19937_64(seed * 5), slow, "server", lazy);
  if (writer.joinable()) writer.join();
  bool ok = received && sent && rings_as_expected("server", *s);
  say_spilled("server", *s);
  if (std::getenv("PEER_EXPECT_SHRINK") != nullptr && (s->rings_shrunk() == 0 || s->rings_grown() < 2)) {
    std::fprintf(stderr, "server: our ring did not grow, shrink while idle and grow again\n");
    ok = false;
  }
  if (std::getenv("PEER_EXPECT_NO_GROWTH") != nullptr && s->rings_grown() != 0) {
    std::fprintf(stderr, "server: our ring grew, for a writer that waited only for room we owed it\n");
    ok = false;
  }
  Status st = s->close();
  print_counters("server", ok && st == Status::kOk, s->counters());
  return ok && st == Status::kOk ? 0 : 1;
}

int run_client(int argc, char** argv, const StreamOptions& options) {
  std::unique_ptr<RdmaStream> s = connect_to(argv[2], argv[3], options);
  if (!s) return 1;
  uint64_t seed = std::strtoull(argv[4], nullptr, 10), bytes = std::strtoull(argv[5], nullptr, 10);
  uint64_t answer = std::strtoull(argv[6], nullptr, 10);
  std::string_view pattern = argc > 7 ? argv[7] : "random";
  std::atomic<bool> received{true};
  auto receive = [&] { received = receive_checked(*s, seed + 1, answer, std::mt19937_64(seed * 3), false, "client"); };
  std::thread reader;
  if (pattern != "write-first") reader = std::thread(receive);
  bool sent = false;
  if (pattern == "random" || pattern == "write-first") sent = send_random(*s, seed, bytes, std::mt19937_64(seed));
  else if (pattern == "zcopy-edge") sent = send_zcopy_edge(*s, seed, bytes, options);
  else if (pattern == "remap") sent = send_remap(*s, seed, bytes);
  else if (pattern == "close-in-flight") sent = send_close_in_flight(*s, seed, bytes);
  else if (pattern == "pauses") sent = send_with_pauses(*s, seed, bytes, std::mt19937_64(seed));
  else if (pattern == "exact-fit") sent = send_exact_fit(*s, seed, bytes);
  else std::fprintf(stderr, "unknown pattern\n");
  Status st = pattern == "close-in-flight" ? Status::kOk : s->shutdown_write();
  if (reader.joinable()) reader.join();
  else receive();
  if (pattern != "close-in-flight" && st == Status::kOk) st = s->close();
  bool ok = sent && received && st == Status::kOk && rings_as_expected("client", *s);
  say_spilled("client", *s);
  StreamCounters c = s->counters();
  if (std::getenv("PEER_EXPECT_STALLS") != nullptr && c.credit_stalls == 0) {
    std::fprintf(stderr, "client: the slow reader never ran this writer out of credits\n");
    ok = false;
  }
  print_counters("client", ok, c);
  return ok ? 0 : 1;
}

}  // namespace

int answer_after_exit(const char* port, const StreamOptions& options) {
  std::unique_ptr<StreamListener> listener = listen_on(port, options);
  std::unique_ptr<RdmaStream> s = listener ? accept_one(*listener) : nullptr;
  if (!s) return 1;
  std::string got;
  for (;;) {
    char buf[64];
    iovec iov{buf, sizeof buf};
    size_t done = 0;
    if (Status st = s->read(&iov, 1, 0, &done); st != Status::kOk) {
      std::printf("server: the read failed before the end: %s\n", to_string(st));
      return 1;
    }
    if (done == 0) break;
    got.append(buf, done);
  }
  write_work_file("read-end", got);
  if (!wait_for_work_file("client-exited", 60)) return 1;
  std::this_thread::sleep_for(std::chrono::seconds(1));  // its disconnect is here by now
  const std::string answer = "answer";
  iovec iov{const_cast<char*>(answer.data()), answer.size()};
  size_t done = 0;
  Status st = s->write(&iov, 1, 0, &done);
  if (st == Status::kOk) st = s->write(&iov, 1, 0, &done);  // an error after bytes taken comes next
  std::printf("server: read \"%s\" and its end; the answer after the client's exit: %s, path failed: %d (%s)\n",
              got.c_str(), to_string(st), s->path_failed(), s->failure_detail().c_str());
  return got == "request" && st != Status::kOk && s->path_failed() ? 0 : 1;
}

int shut_and_exit(const char* host, const char* port, const StreamOptions& options) {
  std::unique_ptr<RdmaStream> s = connect_to(host, port, options);
  if (!s) return 1;
  const std::string request = "request";
  iovec iov{const_cast<char*>(request.data()), request.size()};
  size_t done = 0;
  if (s->write(&iov, 1, 0, &done) != Status::kOk || s->shutdown_write() != Status::kOk) return 1;
  if (!wait_for_work_file("read-end", 60)) return 1;
  std::_Exit(0);  // no close, no release: the kernel ends the connection
}

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  StreamOptions options = test_options();
  std::string_view mode = argc > 1 ? argv[1] : "";
  if (argc >= 6 && mode == "server") return run_server(argc, argv, options);
  if (argc >= 7 && mode == "client") return run_client(argc, argv, options);
  if (argc == 4 && mode == "server-until-reset") {
    std::unique_ptr<StreamListener> listener = listen_on(argv[2], options);
    std::unique_ptr<RdmaStream> s = listener ? accept_one(*listener) : nullptr;
    if (!s) return 1;
    if (std::getenv("PEER_TRACE") != nullptr) {
      std::thread([&s] {
        for (;;) {
          std::this_thread::sleep_for(std::chrono::seconds(3));
          print_counters("server (trace)", true, s->counters());
        }
      }).detach();
    }
    return read_until_failure(*s, std::strtoull(argv[3], nullptr, 10), Status::kReset, true);
  }
  if (argc == 3 && mode == "server-isolation") {
    std::unique_ptr<StreamListener> listener = listen_on(argv[2], options);
    std::unique_ptr<RdmaStream> a = listener ? accept_one(*listener) : nullptr;
    std::unique_ptr<RdmaStream> b = listener ? accept_one(*listener) : nullptr;
    if (!a || !b) return 1;
    std::string got;
    for (;;) {
      char buf[256];
      iovec iov{buf, sizeof buf};
      size_t done = 0;
      Status st = a->read(&iov, 1, 0, &done);
      if (st != Status::kOk) {
        std::printf("server: stream A failed: %s\n", to_string(st));
        return 1;
      }
      if (done == 0) break;
      got.append(buf, done);
    }
    std::printf("server: stream A carried \"%s\", then its end\n", got.c_str());
    return got == "through A, untouched" ? 0 : 1;
  }
  if (argc == 3 && mode == "server-zcopy-abort") {
    std::unique_ptr<StreamListener> listener = listen_on(argv[2], options);
    std::unique_ptr<RdmaStream> s = listener ? accept_one(*listener) : nullptr;
    if (!s) return 1;
    std::vector<uint8_t> buf(8 << 20, 'z');
    Status st = Status::kOk;
    size_t done = 0;
    StreamCounters at_return;
    std::thread writer([&] {
      iovec iov{buf.data(), buf.size()};
      st = s->write(&iov, 1, 0, &done);  // kOk with a short count, or the reset
      at_return = s->counters();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // well before RDMA's retries end
    s->abort();
    writer.join();
    std::printf("server: write ended with %s after %zu of %zu bytes (%llu by zero-copy); %llu zero-copy writes "
                "in flight then\n", to_string(st), done, buf.size(), static_cast<unsigned long long>(at_return.zcopy_bytes),
                static_cast<unsigned long long>(at_return.zcopy_in_flight));
    return done < buf.size() && at_return.zcopy_bytes > 0 && at_return.zcopy_in_flight == 0 ? 0 : 1;
  }
  if (argc == 3 && mode == "server-owed-close") {
    std::unique_ptr<StreamListener> listener = listen_on(argv[2], options);
    std::unique_ptr<RdmaStream> s = listener ? accept_one(*listener) : nullptr;
    if (!s) return 1;
    // Small writes, one message each, until the data credits are gone (two receives stay back); a
    // write may also wait for a completion of ours, so only a second of nothing taken ends the loop.
    std::vector<uint8_t> small(100, 's');
    iovec iov{small.data(), small.size()};
    int writes = 0;
    for (int idle = 0; idle < 20 && writes < 100;) {
      size_t done = 0;
      Status st = s->write(&iov, 1, kNonBlocking, &done);
      if (st == Status::kOk && done > 0) {
        ++writes;
        idle = 0;
      } else if (st == Status::kWouldBlock) {
        ++idle;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      } else {
        std::printf("server: a small write failed: %s\n", to_string(st));
        return 1;
      }
    }
    // A blocking write then arms (one receive) and sleeps; the peer's arm takes the last for our wakeup.
    std::thread writer([&] {
      size_t more = 0;
      s->write(&iov, 1, 0, &more);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(3000));
    auto started = std::chrono::steady_clock::now();
    Status shut = s->shutdown_write();
    auto shut_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started).count();
    StreamCounters after_shutdown = s->counters();
    started = std::chrono::steady_clock::now();
    Status closed = s->close(Deadline(started + std::chrono::milliseconds(1500)));
    auto close_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started).count();
    writer.join();
    std::printf("server: %d small writes; shutdown %s in %lld ms (end waiting: %llu); close %s in %lld ms\n",
                writes, to_string(shut), static_cast<long long>(shut_ms),
                static_cast<unsigned long long>(after_shutdown.end_waiting), to_string(closed),
                static_cast<long long>(close_ms));
    return after_shutdown.end_waiting == 1 && shut == Status::kOk && shut_ms < 200 && closed != Status::kOk &&
                   close_ms < 2500
               ? 0
               : 1;
  }
  if (argc == 3 && mode == "server-expect-violation") {
    std::unique_ptr<StreamListener> listener = listen_on(argv[2], options);
    std::unique_ptr<RdmaStream> s = listener ? accept_one(*listener) : nullptr;
    int result = s ? read_until_failure(*s, 0, Status::kProtocolError, false) : 1;
    // Held a while with its failed stream (PEER_HOLD_FAILED_MS): the link must go at the violation,
    // not when its last stream does.
    if (const char* hold = std::getenv("PEER_HOLD_FAILED_MS")) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(hold)));
    }
    return result;
  }
  if (argc == 5 && mode == "client-forever") {
    std::unique_ptr<RdmaStream> s = connect_to(argv[2], argv[3], options);
    if (!s) return 1;
    std::fprintf(stderr, "client: connected\n");  // host_crash.sh crashes only after this
    send_random(*s, std::strtoull(argv[4], nullptr, 10), ~uint64_t{0} >> 1, std::mt19937_64(1));
    return 1;  // only a kill should end it
  }
  if (argc == 3 && mode == "server-answer-after-exit") return answer_after_exit(argv[2], options);
  if (argc == 4 && mode == "client-shut-exit") return shut_and_exit(argv[2], argv[3], options);
  std::fprintf(stderr, "usage: see the comment at the top of stream_peer.cpp\n");
  return 2;
}
