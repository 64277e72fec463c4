// Both directions at once across the switch (Soft-RoCE VM, `upgrade: background`): each side starts
// writing the moment its connect() or accept() returns, so bytes are on TCP when the switch begins,
// and goes on writing and reading in pieces of random size (1 B to 64 KiB) until it has sent `MiB`
// mebibytes; then it shuts down its sending side and reads to the end. Every byte read is checked
// against the sequence the peer writes: a byte lost, duplicated or reordered at the switch fails the
// run with its offset. With TCP2RDMA_LOG set, each side writes its first 8 MiB, then writes no more
// (reading on) until the shim has logged this process's switch (at most 30 s), so that the switch
// lands mid-stream however long the RDMA setup takes on a loaded guest.
//   switch_duplex server PORT MIB         non-blocking socket, one thread, poll()
//   switch_duplex client IP PORT MIB      blocking socket, a writer thread and a reader thread
//                                           (some reads with MSG_WAITALL)
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "test_sockets.h"

namespace {

// The byte sequence of one direction: the same on both sides, whatever pieces it is cut into.
class Sequence {
 public:
  explicit Sequence(uint64_t seed) : state_(seed * 0x9e3779b97f4a7c15ull + 1) {}
  uint8_t next() {
    state_ ^= state_ << 13;
    state_ ^= state_ >> 7;
    state_ ^= state_ << 17;
    return static_cast<uint8_t>(state_ >> 24);
  }

 private:
  uint64_t state_;
};

constexpr uint64_t kClientToServer = 1, kServerToClient = 2;
constexpr uint64_t kBeforeSwitch = uint64_t{8} << 20;

// Whether writing may go past kBeforeSwitch: the shim's log names this process's switch, or there is
// no log to wait for, or 30 s have passed (the shims' logs then tell why).
class SwitchGate {
 public:
  bool open() {
    if (open_) return true;
    const char* log = std::getenv("TCP2RDMA_LOG");
    if (log == nullptr || std::chrono::steady_clock::now() > give_up_) return open_ = true;
    std::ifstream in(log);
    std::string line, me = "tcp2rdma[" + std::to_string(getpid()) + "]";
    while (std::getline(in, line)) {
      if (line.rfind(me, 0) == 0 && line.find("upgraded to rdma") != std::string::npos) return open_ = true;
    }
    return false;
  }

 private:
  bool open_ = false;
  std::chrono::steady_clock::time_point give_up_ = std::chrono::steady_clock::now() + std::chrono::seconds(30);
};

struct Checker {
  explicit Checker(uint64_t seed) : expected(seed) {}
  Sequence expected;
  uint64_t offset = 0;
  bool check(const uint8_t* p, size_t n) {
    for (size_t i = 0; i < n; ++i, ++offset) {
      uint8_t want = expected.next();
      if (p[i] != want) {
        fprintf(stderr, "byte %llu: got 0x%02x, want 0x%02x\n", static_cast<unsigned long long>(offset), p[i], want);
        return false;
      }
    }
    return true;
  }
};

size_t piece(std::mt19937& rng) {
  // Mostly small pieces, some large: both the inline/bounce and the zero-copy paths.
  return std::uniform_int_distribution<int>(0, 3)(rng) == 0 ? std::uniform_int_distribution<size_t>(1, 65536)(rng)
                                                            : std::uniform_int_distribution<size_t>(1, 2048)(rng);
}

[[noreturn]] void die(const char* what) {
  fprintf(stderr, "%s: %s\n", what, strerror(errno));
  exit(1);
}

int run_server(const char* port, uint64_t total) {
  int listener = tcp2rdma::test::listen_on(port);
  if (listener < 0) die("listen");
  fprintf(stderr, "listening\n");
  int fd = accept(listener, nullptr, nullptr);
  if (fd < 0) die("accept");
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  std::mt19937 rng(std::random_device{}());
  Sequence out(kServerToClient);
  Checker in(kClientToServer);
  std::vector<uint8_t> pending, buf(65536);
  uint64_t generated = 0;
  bool shut = false, eof = false;
  SwitchGate gate;
  while (!(shut && eof)) {
    if (pending.empty() && generated < total && (generated < kBeforeSwitch || gate.open())) {
      pending.resize(std::min<uint64_t>(piece(rng), total - generated));
      for (auto& b : pending) b = out.next();
      generated += pending.size();
    }
    pollfd p{fd, static_cast<short>(POLLIN | (pending.empty() ? 0 : POLLOUT)), 0};
    int ready = poll(&p, 1, pending.empty() && generated < total ? 100 : 60000);  // looks at the gate again
    if (ready < 0 || (ready == 0 && !(pending.empty() && generated < total))) die("poll (stalled for 60 s, or failed)");
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t r = recv(fd, buf.data(), piece(rng), 0);
      if (r > 0 && !in.check(buf.data(), static_cast<size_t>(r))) return 1;
      if (r == 0) eof = true;
      if (r < 0 && errno != EAGAIN) die("recv");
    }
    if (!pending.empty() && (p.revents & POLLOUT)) {
      ssize_t w = send(fd, pending.data(), pending.size(), MSG_NOSIGNAL);
      if (w < 0 && errno != EAGAIN) die("send");
      if (w > 0) pending.erase(pending.begin(), pending.begin() + w);
    }
    if (!shut && pending.empty() && generated == total) {
      if (shutdown(fd, SHUT_WR) != 0) die("shutdown");
      shut = true;
    }
  }
  if (in.offset != total) {
    fprintf(stderr, "received %llu bytes, want %llu\n", static_cast<unsigned long long>(in.offset),
            static_cast<unsigned long long>(total));
    return 1;
  }
  printf("server: sent %llu, received %llu, every byte as sent\n", static_cast<unsigned long long>(total),
         static_cast<unsigned long long>(in.offset));
  close(fd);
  return 0;
}

int run_client(const char* ip, const char* port, uint64_t total) {
  int fd = tcp2rdma::test::connect_retrying(ip, port);
  if (fd < 0) die("connect");
  bool write_failed = false;
  std::thread writer([&] {
    std::mt19937 rng(std::random_device{}());
    Sequence out(kClientToServer);
    std::vector<uint8_t> chunk;
    SwitchGate gate;
    for (uint64_t sent = 0; sent < total;) {
      while (sent >= kBeforeSwitch && !gate.open()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      chunk.resize(std::min<uint64_t>(piece(rng), total - sent));
      for (auto& b : chunk) b = out.next();
      if (send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(chunk.size())) {
        write_failed = true;
        return;
      }
      sent += chunk.size();
    }
    shutdown(fd, SHUT_WR);
  });
  std::mt19937 rng(std::random_device{}());
  Checker in(kServerToClient);
  std::vector<uint8_t> buf(65536);
  int status = 0;
  for (;;) {
    int flags = std::uniform_int_distribution<int>(0, 7)(rng) == 0 ? MSG_WAITALL : 0;
    ssize_t r = recv(fd, buf.data(), piece(rng), flags);
    if (r < 0) die("recv");
    if (r == 0) break;
    if (!in.check(buf.data(), static_cast<size_t>(r))) {
      status = 1;
      break;
    }
  }
  writer.join();
  if (write_failed) die("send");
  if (status == 0 && in.offset != total) {
    fprintf(stderr, "received %llu bytes, want %llu\n", static_cast<unsigned long long>(in.offset),
            static_cast<unsigned long long>(total));
    status = 1;
  }
  if (status == 0) {
    printf("client: sent %llu, received %llu, every byte as sent\n", static_cast<unsigned long long>(total),
           static_cast<unsigned long long>(in.offset));
  }
  close(fd);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && strcmp(argv[1], "server") == 0) return run_server(argv[2], std::strtoull(argv[3], nullptr, 10) << 20);
  if (argc == 5 && strcmp(argv[1], "client") == 0) {
    return run_client(argv[2], argv[3], std::strtoull(argv[4], nullptr, 10) << 20);
  }
  fprintf(stderr, "usage: switch_duplex server PORT MIB | client IP PORT MIB\n");
  return 2;
}
