// poll_duplicates: a writer that polls its connection the way OpenBSD nc does, the same descriptor in
// several entries of one poll() call (one for POLLOUT, the others for POLLIN), against a reader that
// reads slowly, so that the writer fills the peer's ring and waits for room many times over.
//
//   poll_duplicates reader PORT BYTES RATE     accepts one connection, reads BYTES at RATE bytes/s
//   poll_duplicates writer HOST PORT BYTES N P connects and writes BYTES, polling with N entries,
//                                              while P other threads poll it for POLLIN
//
// Every byte is a function of its position (xorshift of the offset): the reader checks each one, so
// a lost, doubled or reordered byte fails it. Under the module a lost wakeup of the writer's poll
// (the news that room came back taken by the look of another entry of the same call, or of another
// thread's poll) leaves both sides idle until a keepalive: the rules set that to a minute, so the
// transfer, a few seconds when every wakeup arrives, outlasts the test's timeout instead.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

uint8_t byte_at(uint64_t offset) {
  uint64_t x = offset / 8 + 0x9e3779b97f4a7c15ULL;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return static_cast<uint8_t>(x >> ((offset % 8) * 8));
}

int reader(int port, uint64_t total, double rate) {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(l, 1) != 0) {
    perror("reader: bind/listen");
    return 1;
  }
  fprintf(stderr, "listening\n");
  int c = accept(l, nullptr, nullptr);
  if (c < 0) {
    perror("reader: accept");
    return 1;
  }
  // Small reads, paced: the writer waits for room (and its wakeup) after every few of them.
  std::vector<uint8_t> buf(4096);
  uint64_t got = 0;
  auto start = std::chrono::steady_clock::now();
  for (;;) {
    double ahead = static_cast<double>(got) / rate -
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (ahead > 0) std::this_thread::sleep_for(std::chrono::duration<double>(ahead));
    ssize_t n = read(c, buf.data(), buf.size());
    if (n < 0) {
      perror("reader: read");
      return 1;
    }
    if (n == 0) break;
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] != byte_at(got + i)) {
        fprintf(stderr, "reader: byte %llu is wrong\n", static_cast<unsigned long long>(got + i));
        return 1;
      }
    }
    got += static_cast<uint64_t>(n);
  }
  printf("reader: %llu bytes, each right\n", static_cast<unsigned long long>(got));
  return got == total ? 0 : 1;
}

int writer(const char* host, int port, uint64_t total, int entries, int pollers) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, host, &a.sin_addr);
  if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    perror("writer: connect");
    return 1;
  }
  fcntl(s, F_SETFL, fcntl(s, F_GETFL) | O_NONBLOCK);
  // Other threads poll the same connection for POLLIN all along (the reader never writes): each of
  // their looks must leave the writer the news of room it sleeps for.
  std::atomic<bool> done{false};
  std::vector<std::thread> others;
  for (int i = 0; i < pollers; ++i) {
    others.emplace_back([s, &done] {
      while (!done.load()) {
        pollfd p{s, POLLIN, 0};
        (void)poll(&p, 1, 100);
      }
    });
  }
  std::vector<pollfd> fds(static_cast<size_t>(entries));
  std::vector<uint8_t> chunk(16384);
  uint64_t sent = 0, waits = 0;
  double longest = 0;
  while (sent < total) {
    for (size_t i = 0; i < chunk.size(); ++i) chunk[i] = byte_at(sent + i);
    size_t want = static_cast<size_t>(std::min<uint64_t>(chunk.size(), total - sent));
    ssize_t n = write(s, chunk.data(), want);
    if (n > 0) {
      sent += static_cast<uint64_t>(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN) {
      perror("writer: write");
      return 1;
    }
    // Full: nc's shape, the descriptor for POLLOUT first, then again for POLLIN.
    fds[0] = {s, POLLOUT, 0};
    for (size_t i = 1; i < fds.size(); ++i) fds[i] = {s, POLLIN, 0};
    auto before = std::chrono::steady_clock::now();
    if (poll(fds.data(), fds.size(), -1) < 0) {
      perror("writer: poll");
      return 1;
    }
    longest = std::max(longest, std::chrono::duration<double>(std::chrono::steady_clock::now() - before).count());
    ++waits;
    for (const pollfd& p : fds) {
      if (p.revents & (POLLERR | POLLHUP)) {
        fprintf(stderr, "writer: the connection failed\n");
        return 1;
      }
    }
  }
  done.store(true);
  for (std::thread& t : others) t.join();
  shutdown(s, SHUT_WR);
  char end = 0;
  fcntl(s, F_SETFL, fcntl(s, F_GETFL) & ~O_NONBLOCK);
  (void)read(s, &end, 1);  // the reader's close
  printf("writer: %llu bytes, %llu waits for room, the longest %.3f s\n", static_cast<unsigned long long>(sent),
         static_cast<unsigned long long>(waits), longest);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && strcmp(argv[1], "reader") == 0) return reader(atoi(argv[2]), strtoull(argv[3], nullptr, 10), atof(argv[4]));
  if (argc == 7 && strcmp(argv[1], "writer") == 0) {
    return writer(argv[2], atoi(argv[3]), strtoull(argv[4], nullptr, 10), atoi(argv[5]), atoi(argv[6]));
  }
  fprintf(stderr, "usage: poll_duplicates reader PORT BYTES RATE | writer HOST PORT BYTES ENTRIES POLLERS\n");
  return 2;
}
