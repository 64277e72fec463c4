// stream_peer: both ends of a byte-exact test of RdmaStream, run in the Soft-RoCE VM.
//   stream_peer server PORT BYTES SEED
//   stream_peer client ADDR PORT BYTES SEED
//   stream_peer server-until-reset PORT SEED     reads and checks until the stream fails; exit 0 only
//                                                 if it failed as a reset (never a clean end of stream)
//   stream_peer client-forever ADDR PORT SEED    writes until killed
//   stream_peer server-expect-violation PORT     reads until the stream fails; exit 0 only if it
//                                                 failed as a protocol violation (tests/hostile_peer)
// The client writes BYTES of a seeded pseudo-random stream in writes of random sizes (1 B to 256 KiB);
// the server reads it in reads of random sizes, checks every byte, then answers with BYTES/2 bytes of
// its own stream, which the client checks. Both close in order. Exit 0 only when every byte matched.
#include <arpa/inet.h>
#include <netdb.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string_view>
#include <thread>
#include <vector>

#include "rdma_stream.h"

using tcp2rdma::transport::RdmaStream;
using tcp2rdma::transport::Status;
using tcp2rdma::transport::StreamListener;
using tcp2rdma::transport::StreamOptions;

namespace {

// The byte at position i of stream `seed`: cheap, and any misplaced or repeated byte shows.
uint8_t stream_byte(uint64_t seed, uint64_t i) {
  uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull ^ seed;
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ull;
  return static_cast<uint8_t>(x >> 56);
}

size_t random_size(std::mt19937_64& rng) {
  switch (rng() % 4) {
    case 0: return 1 + rng() % 16;
    case 1: return 1 + rng() % 4096;
    case 2: return 1 + rng() % 65536;
    default: return 1 + rng() % 262144;
  }
}

bool send_stream(RdmaStream& s, uint64_t seed, uint64_t bytes, std::mt19937_64& rng) {
  std::vector<uint8_t> buf(262144);
  for (uint64_t pos = 0; pos < bytes;) {
    size_t n = std::min<uint64_t>(random_size(rng), bytes - pos);
    for (size_t i = 0; i < n; ++i) buf[i] = stream_byte(seed, pos + i);
    iovec iov{buf.data(), n};
    size_t done = 0;
    if (Status st = s.write(&iov, 1, &done); st != Status::kOk) {
      std::fprintf(stderr, "write at %llu: %s\n", static_cast<unsigned long long>(pos), to_string(st));
      return false;
    }
    pos += done;
  }
  return true;
}

bool receive_stream(RdmaStream& s, uint64_t seed, uint64_t bytes, std::mt19937_64& rng) {
  std::vector<uint8_t> buf(262144);
  for (uint64_t pos = 0; pos < bytes;) {
    iovec iov{buf.data(), std::min<uint64_t>(random_size(rng), bytes - pos)};
    size_t done = 0;
    if (Status st = s.read(&iov, 1, &done); st != Status::kOk || done == 0) {
      std::fprintf(stderr, "read at %llu: %s\n", static_cast<unsigned long long>(pos),
                   done == 0 && st == Status::kOk ? "early end of stream" : to_string(st));
      return false;
    }
    for (size_t i = 0; i < done; ++i) {
      if (buf[i] != stream_byte(seed, pos + i)) {
        std::fprintf(stderr, "byte %llu differs\n", static_cast<unsigned long long>(pos + i));
        return false;
      }
    }
    pos += done;
  }
  return true;
}

int finish(RdmaStream& s, bool ok, const char* who, uint64_t bytes) {
  Status st = s.close();
  std::printf("%s: %s, %llu bytes client->server and %llu back checked, close %s, %llu wakeups received\n", who,
              ok ? "ok" : "FAILED", static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(bytes / 2),
              to_string(st), static_cast<unsigned long long>(s.wakeups_received()));
  return ok && st == Status::kOk ? 0 : 1;
}

std::unique_ptr<RdmaStream> accept_one(const char* port, const StreamOptions& options) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::atoi(port)));
  std::unique_ptr<StreamListener> listener;
  if (Status st = StreamListener::listen(reinterpret_cast<sockaddr*>(&addr), options, &listener); st != Status::kOk) {
    std::fprintf(stderr, "listen: %s\n", to_string(st));
    return nullptr;
  }
  std::unique_ptr<RdmaStream> s;
  if (Status st = listener->accept(&s); st != Status::kOk) std::fprintf(stderr, "accept: %s\n", to_string(st));
  return s;
}

std::unique_ptr<RdmaStream> connect_to(const char* host, const char* port, const StreamOptions& options) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  if (getaddrinfo(host, port, &hints, &res) != 0) return nullptr;
  std::unique_ptr<RdmaStream> s;
  Status st = Status::kRejected;
  // The server may not be listening yet: retry what that looks like, and nothing else.
  for (int attempt = 0; attempt < 50 && st != Status::kOk; ++attempt) {
    st = RdmaStream::connect(res->ai_addr, options, &s);
    if (st != Status::kRejected && st != Status::kNoRoute && st != Status::kTimeout) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  freeaddrinfo(res);
  if (st != Status::kOk) std::fprintf(stderr, "connect: %s\n", to_string(st));
  return s;
}

// Reads until the stream fails; the failure must be `expected`.
int read_until_failure(RdmaStream& s, Status expected) {
  std::vector<uint8_t> buf(65536);
  for (;;) {
    iovec iov{buf.data(), buf.size()};
    size_t done = 0;
    Status st = s.read(&iov, 1, &done);
    if (st != Status::kOk || done == 0) {
      std::printf("server: the stream ended with: %s\n", st == Status::kOk ? "a clean end of stream" : to_string(st));
      return st == expected ? 0 : 1;
    }
  }
}

// Reads and checks until the stream fails. A killed peer must show as a reset, not as an end.
int read_until_reset(RdmaStream& s, uint64_t seed) {
  std::vector<uint8_t> buf(65536);
  for (uint64_t pos = 0;;) {
    iovec iov{buf.data(), buf.size()};
    size_t done = 0;
    Status st = s.read(&iov, 1, &done);
    if (st != Status::kOk || done == 0) {
      std::printf("server: after %llu good bytes the stream ended with: %s\n", static_cast<unsigned long long>(pos),
                  st == Status::kOk ? "a clean end of stream (WRONG: the peer was killed)" : to_string(st));
      return st == Status::kReset && pos > 0 ? 0 : 1;
    }
    for (size_t i = 0; i < done; ++i) {
      if (buf[i] != stream_byte(seed, pos + i)) {
        std::printf("server: byte %llu differs\n", static_cast<unsigned long long>(pos + i));
        return 1;
      }
    }
    pos += done;
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  StreamOptions options;
  options.ring_size_log2 = 16;  // a small ring: credits run out often
  options.recv_queue_depth = 8;
  std::string_view mode = argc > 1 ? argv[1] : "";
  if (argc == 5 && mode == "server") {
    std::unique_ptr<RdmaStream> s = accept_one(argv[2], options);
    if (!s) return 1;
    uint64_t bytes = std::strtoull(argv[3], nullptr, 10), seed = std::strtoull(argv[4], nullptr, 10);
    std::mt19937_64 rng(seed * 7);
    bool ok = receive_stream(*s, seed, bytes, rng) && send_stream(*s, seed + 1, bytes / 2, rng);
    return finish(*s, ok, "server", bytes);
  }
  if (argc == 6 && mode == "client") {
    std::unique_ptr<RdmaStream> s = connect_to(argv[2], argv[3], options);
    if (!s) return 1;
    uint64_t bytes = std::strtoull(argv[4], nullptr, 10), seed = std::strtoull(argv[5], nullptr, 10);
    std::mt19937_64 rng(seed);
    bool ok = send_stream(*s, seed, bytes, rng) && receive_stream(*s, seed + 1, bytes / 2, rng);
    return finish(*s, ok, "client", bytes);
  }
  if (argc == 4 && mode == "server-until-reset") {
    std::unique_ptr<RdmaStream> s = accept_one(argv[2], options);
    return s ? read_until_reset(*s, std::strtoull(argv[3], nullptr, 10)) : 1;
  }
  if (argc == 3 && mode == "server-expect-violation") {
    std::unique_ptr<RdmaStream> s = accept_one(argv[2], options);
    return s ? read_until_failure(*s, Status::kProtocolError) : 1;
  }
  if (argc == 5 && mode == "client-forever") {
    std::unique_ptr<RdmaStream> s = connect_to(argv[2], argv[3], options);
    if (!s) return 1;
    std::mt19937_64 rng(1);
    send_stream(*s, std::strtoull(argv[4], nullptr, 10), ~uint64_t{0} >> 1, rng);
    return 1;  // only a kill should end it
  }
  std::fprintf(stderr, "usage: see the comment at the top of stream_peer.cpp\n");
  return 2;
}
