// stream_channels: many short streams from several threads of one client process to one server, which
// open as channels on the links the first ones made (docs/links.md). Run in the Soft-RoCE VM.
//   stream_channels server PORT TOTAL       accepts TOTAL streams; a thread each echoes until the end
//                                           (or a reset), then closes
//   stream_channels client ADDR PORT THREADS ROUNDS
// Each client round: connect, write 1..60000 checked bytes, shut down, read the echo whole, check it,
// close. Every fifth round aborts after writing instead (the server's stream reads a reset, and the
// link goes on). Every stream has a client port of its own in its tuple (the listener refuses two
// requests for one tuple). The client exits 0 only if every echo matched, at least three quarters
// of its streams opened on a live link, and a quarter of their rings and mirrors came registered from
// their link's pool (docs/links.md, "A link's pool"); the server only if it accepted TOTAL streams,
// every echo ended as it should, and an eighth of its channels' rings and mirrors came from its pool.
#include <atomic>
#include <mutex>
#include <string_view>
#include <vector>

#include "peer_util.h"

using namespace peer_util;

namespace {

std::atomic<uint16_t> next_client_port{20000};

std::unique_ptr<RdmaStream> connect_channel(const char* host, const char* port, const StreamOptions& options) {
  sockaddr_in addr = ipv4(host, port);
  Pairing pairing;
  pairing.tuple.family = AF_INET;
  pairing.tuple.client_port = next_client_port++;
  pairing.tuple.server_port = static_cast<uint16_t>(std::atoi(port));
  std::memcpy(pairing.tuple.server_addr, &addr.sin_addr, 4);
  pairing.client_nonce = tcp2rdma::transport::random_nonce();
  std::unique_ptr<RdmaStream> s;
  Status st = Status::kRejected;
  tcp2rdma::transport::DeclineReason why = tcp2rdma::transport::DeclineReason::kNone;
  for (int attempt = 0; attempt < 100 && st != Status::kOk; ++attempt) {  // the server may not listen yet
    st = RdmaStream::connect(reinterpret_cast<sockaddr*>(&addr), pairing, options, &s, &why);
    if (why != tcp2rdma::transport::DeclineReason::kNone) break;  // a real no, not "nobody listens yet"
    if (st != Status::kRejected && st != Status::kNoRoute) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (st != Status::kOk) std::fprintf(stderr, "connect: %s (%s)\n", to_string(st), to_string(why));
  return s;
}

bool write_all(RdmaStream& s, const uint8_t* p, size_t n) {
  while (n > 0) {
    iovec iov{const_cast<uint8_t*>(p), n};
    size_t done = 0;
    if (s.write(&iov, 1, 0, &done) != Status::kOk) return false;
    p += done;
    n -= done;
  }
  return true;
}

// One client round; false on any failure.
bool round_trip(const char* host, const char* port, const StreamOptions& options, std::mt19937_64& rng, bool abort,
                std::atomic<int>* on_link, std::atomic<int>* from_pool) {
  std::unique_ptr<RdmaStream> s = connect_channel(host, port, options);
  if (!s) return false;
  *on_link += s->opened_on_link();
  *from_pool += s->regions_from_pool();
  size_t n = 1 + rng() % 60000;  // within a ring each way: the client writes all before it reads
  uint64_t seed = s->client_nonce();
  std::vector<uint8_t> out(n), in(n + 1);
  fill(out.data(), n, seed, 0);
  if (!write_all(*s, out.data(), n)) return false;
  if (abort) {
    s->abort();
    return true;
  }
  if (s->shutdown_write() != Status::kOk) return false;
  size_t got = 0;
  for (;;) {
    iovec iov{in.data() + got, in.size() - got};
    size_t done = 0;
    if (Status st = s->read(&iov, 1, 0, &done); st != Status::kOk) {
      std::fprintf(stderr, "client: read: %s after %zu of %zu (%s)\n", to_string(st), got, n,
                   s->failure_detail().c_str());
      return false;
    }
    if (done == 0) break;
    got += done;
    if (got > n) break;
  }
  if (got != n || first_difference(in.data(), n, seed, 0) != n) {
    std::fprintf(stderr, "client: echo of %zu bytes came back as %zu, first difference at %zu\n", n, got,
                 first_difference(in.data(), std::min(got, n), seed, 0));
    return false;
  }
  return s->close() == Status::kOk;
}

int client(const char* host, const char* port, int threads, int rounds, const StreamOptions& options) {
  std::atomic<int> failures{0}, on_link{0}, from_pool{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<uint64_t>(t) + 1);
      for (int r = 0; r < rounds; ++r) {
        if (!round_trip(host, port, options, rng, r % 5 == 4, &on_link, &from_pool)) ++failures;
      }
    });
  }
  for (std::thread& w : workers) w.join();
  int total = threads * rounds;
  std::printf("client: %d streams from %d threads, %d failed, %d opened on a live link, %d rings and mirrors from "
              "the links' pools\n", total, threads, failures.load(), on_link.load(), from_pool.load());
  // A round's ring and mirror come from its link's pool when an earlier round's were released in time
  // (first run: 260 of the 398 of 199 streams on a live link); a quarter is the floor.
  return failures == 0 && on_link * 4 >= total * 3 && from_pool * 4 >= on_link * 2 ? 0 : 1;
}

// Echoes until the end; a reset (the client's abort) is fine too. False on anything else.
bool echo(RdmaStream& s) {
  std::vector<uint8_t> buf(65536);
  for (;;) {
    iovec iov{buf.data(), buf.size()};
    size_t done = 0;
    Status st = s.read(&iov, 1, 0, &done);
    if (st == Status::kReset) return true;
    if (st != Status::kOk) {
      std::fprintf(stderr, "server: read: %s\n", to_string(st));
      return false;
    }
    if (done == 0) return s.close() == Status::kOk;
    if (!write_all(s, buf.data(), done)) return true;  // reset by the client's abort while echoing
  }
}

int server(const char* port, int total, const StreamOptions& options) {
  std::unique_ptr<StreamListener> listener = listen_on(port, options);
  if (!listener) return 1;
  std::atomic<int> failures{0};
  int on_link = 0, from_pool = 0;
  std::vector<std::thread> workers;
  for (int i = 0; i < total; ++i) {
    std::shared_ptr<RdmaStream> s = accept_one(*listener);
    if (!s) return 1;
    on_link += s->opened_on_link();
    from_pool += s->regions_from_pool();
    workers.emplace_back([s, &failures] {
      if (!echo(*s)) ++failures;
    });
  }
  for (std::thread& w : workers) w.join();
  std::printf("server: %d streams, %d failed, %d opened on a live link, %d rings and mirrors from the links' pools\n",
              total, failures.load(), on_link, from_pool);
  // Its channels retire when the client's release comes (first run: 169 of 398); an eighth is the floor.
  return failures == 0 && from_pool * 8 >= on_link * 2 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  StreamOptions options;
  options.ring_size_log2 = 16;
  std::string_view mode = argc > 1 ? argv[1] : "";
  if (argc == 4 && mode == "server") return server(argv[2], std::atoi(argv[3]), options);
  if (argc == 6 && mode == "client") return client(argv[2], argv[3], std::atoi(argv[4]), std::atoi(argv[5]), options);
  std::fprintf(stderr, "usage: see the comment at the top of stream_channels.cpp\n");
  return 2;
}
