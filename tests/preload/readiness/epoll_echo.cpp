// epoll_echo: an epoll echo server and a checking client, run under the shim to test epoll on
// upgraded connections (Soft-RoCE pair).
//   epoll_echo server PORT lt|et|oneshot|nested|polled|two-threads
//       one epoll set holds the listener (a kernel socket) and the accepted connection (upgraded);
//       echoes one connection, then exits 0 at its end. nested: the connection is level-triggered
//       in an inner set, and the outer set watches the inner one (with the listener); one read per
//       wakeup, so the outer set must go on reporting while unread bytes remain. polled: the same
//       with poll() on the set's descriptor in place of the outer set. two-threads: two threads wait
//       on the set and take turns, 4 KiB each; a thread woken out of turn leaves the bytes to the
//       other, which only the level-triggered report of the bytes left can wake.
//   epoll_echo server PORT handoff
//       a worker thread sleeps in epoll_wait on a set of its own that holds only an eventfd; the
//       main thread accepts and adds the connection to the worker's set meanwhile (an acceptor
//       handing connections to its workers): every event the worker gets must carry data the
//       application registered, and it echoes the connection to its end
//   epoll_echo server PORT lt|nested|polled|two-threads blocks
//       the same, reading at most 1000 bytes a wakeup and checking them against the pattern, with a
//       4-byte count (the bytes read so far) for each 20000 read in place of the echo: between two
//       blocks nothing arrives and nothing is sent, so only the level-triggered report of the
//       bytes left brings the next wakeup (the echo's own completions and the client's steady
//       stream would hide a missing one)
//   epoll_echo client-blocks ADDR PORT ROUNDS
//       writes 20000 bytes of the pattern and waits for the server's count, ROUNDS times
//   epoll_echo client ADDR PORT BYTES
//       writes BYTES of a pattern from a thread while it reads and checks the echo; exit 0 only if
//       every byte came back
//   epoll_echo client-fork ADDR PORT BYTES
//       writes the first 200000 bytes, waits for their echo to arrive, forks; the parent writes the
//       rest and ends its sending side, the child reads and checks all of it (docs/architecture.md,
//       "Forks": the child only reads, through its parent's relay, and the connection stays on RDMA)
//   epoll_echo client-fork-whole ADDR PORT BYTES
//       the same, but the child first asks SO_ERROR, which claims the connection whole: it moves
//       back to TCP, and the server's epoll follows it
//   epoll_echo client-fork-under ADDR PORT BYTES read|epoll
//       a thread sleeps on the empty connection in read() or epoll_wait() while another forks (the
//       child exits at once); then the parent writes BYTES and the sleeper reads and checks the echo
//   epoll_echo client-epoll ADDR PORT BYTES
//       the same from one thread driven by epoll alone: a non-blocking connect is added to the set
//       before it completes (EPOLLIN | EPOLLOUT), SO_ERROR says when it is up, then every write
//       waits for EPOLLOUT and every read for EPOLLIN
//   epoll_echo client-reregister ADDR PORT ROUNDS
//       request and echo, ROUNDS times, as an event loop with one connection registers it (ae, libevent):
//       added for EPOLLOUT, deleted after the write, added for EPOLLIN, deleted after the echo; after
//       every even round a wait on the set reports nothing (nothing of the application's is in it),
//       and before every 16th the set is closed and a new one made (it usually gets the same number)
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

namespace {

// server ... blocks (see the top of the file).
bool g_blocks = false;
constexpr size_t kBlock = 20000, kBlockRead = 1000;

char pattern(uint64_t i) { return static_cast<char>((i * 2654435761u) >> 13); }

bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EAGAIN) {
      usleep(100);
      continue;
    }
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// What a server does with r bytes it read at stream offset `at`: echoes them, or (blocks) checks
// them and sends the count read so far at the end of each block. False on a write error or a byte
// that differs.
bool answer(int fd, const char* p, size_t r, uint64_t at) {
  if (!g_blocks) return write_all(fd, p, r);
  for (size_t i = 0; i < r; ++i) {
    if (p[i] != pattern(at + i)) {
      std::fprintf(stderr, "server: byte %llu differs\n", static_cast<unsigned long long>(at + i));
      return false;
    }
  }
  uint64_t done = at + r;
  if (done / kBlock == at / kBlock) return true;
  auto count = static_cast<uint32_t>(done);
  return write_all(fd, reinterpret_cast<const char*>(&count), sizeof count);
}

// server two-threads: the connection, once accepted, is echoed by two threads that wait on `ep`
// and take turns. Level-triggered, 4 KiB a turn, so bytes usually remain: a thread whose wait
// reported the connection out of its turn waits for its turn without reading, and the thread whose
// turn it is sleeps in epoll_wait, woken only because a level-triggered report wakes every waiter
// while the connection stays ready (as the kernel's does). 0 at the connection's end.
int serve_in_turns(int listener, int ep, uint32_t conn_events) {
  int c = accept4(listener, nullptr, nullptr, SOCK_NONBLOCK);
  epoll_event cev{};
  cev.events = conn_events;
  cev.data.fd = c;
  if (c < 0 || epoll_ctl(ep, EPOLL_CTL_DEL, listener, nullptr) != 0 || epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev) != 0) return 1;
  std::mutex mu;
  std::condition_variable turns;
  int turn = 0;
  bool done = false, failed = false;
  uint64_t echoed = 0;
  auto take_turns = [&](int me) {
    char buf[4096];
    for (;;) {
      epoll_event got{};
      int n = epoll_wait(ep, &got, 1, 20000);
      std::unique_lock lock(mu);
      if (n <= 0 && !done) {
        std::fprintf(stderr, "server: thread %d: epoll_wait returned %d (%s)\n", me, n, n < 0 ? strerror(errno) : "timeout");
        failed = done = true;
      }
      turns.wait(lock, [&] { return turn == me || done; });
      if (done) break;
      ssize_t r = read(c, buf, g_blocks ? kBlockRead : sizeof buf);
      if (r == 0) done = true;
      if (r < 0 && errno != EAGAIN) failed = done = true;
      if (r > 0 && !answer(c, buf, static_cast<size_t>(r), echoed)) failed = done = true;
      if (r > 0) echoed += static_cast<uint64_t>(r);
      turn = 1 - me;
      turns.notify_all();
    }
    turns.notify_all();
  };
  std::thread other(take_turns, 1);
  take_turns(0);
  other.join();
  std::printf("server (two-threads): echoed %llu bytes, %s\n", static_cast<unsigned long long>(echoed),
              failed ? "FAILED" : "then the end");
  close(c);
  return failed ? 1 : 0;
}

// server handoff (see the top of the file).
int serve_handed_off(int listener) {
  int ep = epoll_create1(EPOLL_CLOEXEC);
  int bell = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_event bev{};
  bev.events = EPOLLIN;
  bev.data.u64 = 1000000 + static_cast<uint64_t>(bell);
  if (epoll_ctl(ep, EPOLL_CTL_ADD, bell, &bev) != 0) return 1;
  std::atomic<int> conn{-1};
  std::atomic<bool> ok{true};
  uint64_t echoed = 0;
  std::thread worker([&] {
    std::vector<char> buf(1 << 16);
    for (;;) {
      epoll_event got[8];
      int n = epoll_wait(ep, got, 8, 20000);
      if (n <= 0) {
        std::fprintf(stderr, "server (handoff): epoll_wait returned %d\n", n);
        ok = false;
        return;
      }
      for (int i = 0; i < n; ++i) {
        int c = conn.load();
        if (c < 0 || got[i].data.u64 != static_cast<uint64_t>(c)) {
          std::fprintf(stderr, "server (handoff): an event with data %#llx, which the application never registered\n",
                       static_cast<unsigned long long>(got[i].data.u64));
          ok = false;
          return;
        }
        ssize_t r = read(c, buf.data(), buf.size());
        if (r == 0) return;
        if (r < 0 && errno == EAGAIN) continue;
        if (r < 0 || !write_all(c, buf.data(), static_cast<size_t>(r))) {
          ok = false;
          return;
        }
        echoed += static_cast<uint64_t>(r);
      }
    }
  });
  usleep(200000);  // the worker is asleep in its wait
  int c = accept4(listener, nullptr, nullptr, SOCK_NONBLOCK);
  conn = c;
  epoll_event cev{};
  cev.events = EPOLLIN | EPOLLRDHUP;
  cev.data.u64 = static_cast<uint64_t>(c);
  if (c < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev) != 0) ok = false;
  worker.join();
  std::printf("server (handoff): echoed %llu bytes, %s\n", static_cast<unsigned long long>(echoed),
              ok ? "then the end" : "FAILED");
  return ok ? 0 : 1;
}

int server(int port, std::string_view mode) {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(listener, 4) != 0) return 1;
  if (mode == "handoff") return serve_handed_off(listener);
  int ep = epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = listener;
  epoll_ctl(ep, EPOLL_CTL_ADD, listener, &ev);
  uint32_t conn_events = EPOLLIN | EPOLLRDHUP;
  if (mode == "et") conn_events |= EPOLLET;
  if (mode == "oneshot") conn_events |= EPOLLONESHOT;
  // nested: connections go into `inner`, which the outer set watches under its own fd.
  int inner = ep;
  if (mode == "nested") {
    inner = epoll_create1(EPOLL_CLOEXEC);
    epoll_event iev{};
    iev.events = EPOLLIN;
    iev.data.fd = inner;
    if (epoll_ctl(ep, EPOLL_CTL_ADD, inner, &iev) != 0) return 1;
  }
  if (mode == "two-threads") return serve_in_turns(listener, ep, conn_events);
  std::vector<char> buf(1 << 16);
  uint64_t echoed = 0, wakeups = 0;
  for (;;) {
    epoll_event got[8];
    int n = 0;
    if (mode == "polled") {
      // The set's readiness as poll sees it: readable while a registration in it is ready.
      pollfd set{ep, POLLIN, 0};
      n = poll(&set, 1, 20000);
      if (n == 1) n = epoll_wait(ep, got, 8, 0);
      if (n == 0 && set.revents != 0) continue;  // a change that made nothing ready
    } else {
      n = epoll_wait(ep, got, 8, 20000);
    }
    if (n <= 0) {
      std::fprintf(stderr, "server: epoll_wait returned %d (%s)\n", n, n < 0 ? strerror(errno) : "timeout");
      return 1;
    }
    if (inner != ep) {
      // nested: an outer event for the inner set stands for the inner set's own events, taken
      // without waiting. (It may have none: a readiness change that made no byte readable.)
      epoll_event outer[8];
      std::memcpy(outer, got, sizeof outer);
      int m = 0;
      for (int i = 0; i < n; ++i) {
        if (outer[i].data.fd != inner) {
          got[m++] = outer[i];
        } else if (int k = epoll_wait(inner, got + m, 8 - m, 0); k > 0) {
          m += k;
        }
      }
      n = m;
    }
    for (int i = 0; i < n; ++i) {
      int fd = got[i].data.fd;
      if (fd == listener) {
        int c = accept4(listener, nullptr, nullptr, SOCK_NONBLOCK);
        epoll_event cev{};
        cev.events = conn_events;
        cev.data.fd = c;
        if (c < 0 || epoll_ctl(inner, EPOLL_CTL_ADD, c, &cev) != 0) return 1;
        continue;
      }
      ++wakeups;
      // Edge-triggered: drain until EAGAIN. Level-triggered and one-shot: one read per wakeup.
      for (;;) {
        ssize_t r = read(fd, buf.data(), g_blocks ? kBlockRead : buf.size());
        if (r == 0) {
          std::printf("server (%s): echoed %llu bytes in %llu wakeups, then the end\n", std::string(mode).c_str(),
                      static_cast<unsigned long long>(echoed), static_cast<unsigned long long>(wakeups));
          epoll_ctl(inner, EPOLL_CTL_DEL, fd, nullptr);
          close(fd);
          return 0;
        }
        if (r < 0) {
          if (errno == EAGAIN) break;
          std::fprintf(stderr, "server: read: %s\n", strerror(errno));
          return 1;
        }
        if (!answer(fd, buf.data(), static_cast<size_t>(r), echoed)) return 1;
        echoed += static_cast<uint64_t>(r);
        if (mode != "et") break;
      }
      if (mode == "oneshot") {
        epoll_event cev{};
        cev.events = conn_events;
        cev.data.fd = fd;
        if (epoll_ctl(ep, EPOLL_CTL_MOD, fd, &cev) != 0) return 1;
      }
    }
  }
}

// A blocking TCP connection to host:port, retried for about 10 s while nobody listens; -1 if never.
int connect_to(const char* host, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, host, &addr.sin_addr);
  int fd = -1;
  for (int attempt = 0; attempt < 50 && fd < 0; ++attempt) {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      close(fd);
      fd = -1;
      usleep(200000);
    }
  }
  return fd;
}

// Writes bytes [from, to) of the pattern in pieces of varying size.
bool write_pattern(int fd, uint64_t from, uint64_t to) {
  std::vector<char> out(100000);
  for (uint64_t pos = from; pos < to;) {
    size_t n = std::min<uint64_t>(to - pos, 1 + (pos * 7) % out.size());
    for (size_t i = 0; i < n; ++i) out[i] = pattern(pos + i);
    if (!write_all(fd, out.data(), n)) return false;
    pos += n;
  }
  return true;
}

// Reads until the end and checks every byte against the pattern; true if all `bytes` came back.
bool read_pattern(int fd, uint64_t bytes, uint64_t* got) {
  std::vector<char> in(65536);
  uint64_t pos = 0;
  bool ok = true;
  for (;;) {
    ssize_t r = read(fd, in.data(), in.size());
    if (r <= 0) {
      ok &= r == 0;
      break;
    }
    for (ssize_t i = 0; i < r; ++i) ok &= in[static_cast<size_t>(i)] == pattern(pos + static_cast<uint64_t>(i));
    pos += static_cast<uint64_t>(r);
  }
  *got = pos;
  return ok && pos == bytes;
}

int client(const char* host, int port, uint64_t bytes) {
  int fd = connect_to(host, port);
  if (fd < 0) return 1;
  std::atomic<bool> sent{false};
  std::thread writer([&] { sent = write_pattern(fd, 0, bytes) && shutdown(fd, SHUT_WR) == 0; });
  std::vector<char> in(65536);
  uint64_t pos = 0;
  bool ok = true;
  while (pos < bytes) {
    ssize_t r = read(fd, in.data(), in.size());
    if (r <= 0) break;
    for (ssize_t i = 0; i < r; ++i) ok &= in[static_cast<size_t>(i)] == pattern(pos + static_cast<uint64_t>(i));
    pos += static_cast<uint64_t>(r);
  }
  writer.join();
  close(fd);
  std::printf("client: %llu of %llu bytes came back, %s\n", static_cast<unsigned long long>(pos),
              static_cast<unsigned long long>(bytes), ok ? "all equal" : "SOME DIFFER");
  return ok && sent && pos == bytes ? 0 : 1;
}

// client-blocks: ROUNDS blocks of the pattern, each answered by the server's count.
int client_blocks(const char* host, int port, int rounds) {
  int fd = connect_to(host, port);
  if (fd < 0) return 1;
  for (int i = 0; i < rounds; ++i) {
    uint64_t from = static_cast<uint64_t>(i) * kBlock;
    uint32_t count = 0;
    uint64_t got = 0;
    if (!write_pattern(fd, from, from + kBlock)) return 1;
    while (got < sizeof count) {
      ssize_t r = read(fd, reinterpret_cast<char*>(&count) + got, sizeof count - got);
      if (r <= 0) {
        std::fprintf(stderr, "client-blocks: round %d: no count (%s)\n", i, r < 0 ? strerror(errno) : "the end");
        return 1;
      }
      got += static_cast<uint64_t>(r);
    }
    if (count != static_cast<uint32_t>(from + kBlock)) {
      std::fprintf(stderr, "client-blocks: round %d: the server counts %u\n", i, count);
      return 1;
    }
  }
  close(fd);
  std::printf("client-blocks: %d blocks of %zu bytes, each counted\n", rounds, kBlock);
  return 0;
}

// Connects without blocking, registered in `ep` before the connect completes; -1 if refused.
int connect_in_epoll(int ep, const sockaddr_in& addr) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  int rc = connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  if (rc != 0 && errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLOUT;
  ev.data.fd = fd;
  if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) return -1;
  epoll_event got{};
  if (epoll_wait(ep, &got, 1, 20000) != 1) return -1;
  int error = 0;
  socklen_t len = sizeof error;
  // Under the shim, this is where the connection moves to RDMA.
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) != 0 || error != 0) {
    epoll_ctl(ep, EPOLL_CTL_DEL, fd, nullptr);
    close(fd);
    return -1;
  }
  return fd;
}

int client_epoll(const char* host, int port, uint64_t bytes) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, host, &addr.sin_addr);
  int ep = epoll_create1(EPOLL_CLOEXEC);
  int fd = -1;
  for (int attempt = 0; attempt < 50 && fd < 0; ++attempt) {
    fd = connect_in_epoll(ep, addr);
    if (fd < 0) usleep(200000);
  }
  if (fd < 0) return 1;
  std::vector<char> out(100000), in(65536);
  uint64_t sent = 0, got = 0, wakeups = 0;
  bool ok = true;
  while (got < bytes) {
    epoll_event ev{};
    if (epoll_wait(ep, &ev, 1, 20000) != 1) {
      std::fprintf(stderr, "client-epoll: no event for 20 s with %llu of %llu bytes sent, %llu back\n",
                   static_cast<unsigned long long>(sent), static_cast<unsigned long long>(bytes),
                   static_cast<unsigned long long>(got));
      return 1;
    }
    ++wakeups;
    if ((ev.events & EPOLLOUT) && sent < bytes) {
      size_t n = std::min<uint64_t>(bytes - sent, 1 + (sent * 7) % out.size());
      for (size_t i = 0; i < n; ++i) out[i] = pattern(sent + i);
      ssize_t w = write(fd, out.data(), n);
      if (w < 0 && errno != EAGAIN) return 1;
      if (w > 0) sent += static_cast<uint64_t>(w);
      if (sent == bytes) {
        // All written: say so, and from now on wait for the echo only.
        epoll_event rev{};
        rev.events = EPOLLIN;
        rev.data.fd = fd;
        if (shutdown(fd, SHUT_WR) != 0 || epoll_ctl(ep, EPOLL_CTL_MOD, fd, &rev) != 0) return 1;
      }
    }
    if (ev.events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
      ssize_t r = read(fd, in.data(), in.size());
      if (r == 0) break;
      if (r < 0 && errno != EAGAIN) return 1;
      for (ssize_t i = 0; i < r; ++i) ok &= in[static_cast<size_t>(i)] == pattern(got + static_cast<uint64_t>(i));
      if (r > 0) got += static_cast<uint64_t>(r);
    }
  }
  close(fd);
  std::printf("client-epoll: %llu of %llu bytes came back in %llu wakeups, %s\n",
              static_cast<unsigned long long>(got), static_cast<unsigned long long>(bytes),
              static_cast<unsigned long long>(wakeups), ok ? "all equal" : "SOME DIFFER");
  return ok && got == bytes ? 0 : 1;
}

// Adds fd to `ep` for `events`, waits for them (20 s at most), takes fd out again; false on a failure.
bool await_alone(int ep, int fd, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) return false;
  epoll_event got{};
  int n = epoll_wait(ep, &got, 1, 20000);
  bool ok = n == 1 && got.data.fd == fd && (got.events & events) != 0;
  return epoll_ctl(ep, EPOLL_CTL_DEL, fd, nullptr) == 0 && ok;
}

int client_reregister(const char* host, int port, int rounds) {
  int fd = connect_to(host, port);
  if (fd < 0 || fcntl(fd, F_SETFL, O_NONBLOCK) != 0) return 1;
  int ep = epoll_create1(0);
  char out[100], in[100];
  for (int round = 0; round < rounds; ++round) {
    if (round % 16 == 0 && round > 0) {  // after an odd round: the link's record is idle in the set
      close(ep);
      ep = epoll_create1(0);
    }
    for (size_t i = 0; i < sizeof out; ++i) out[i] = pattern(round * sizeof out + i);
    if (ep < 0 || !await_alone(ep, fd, EPOLLOUT) || write(fd, out, sizeof out) != sizeof out) {
      std::fprintf(stderr, "client-reregister: round %d: no room to write (%s)\n", round, std::strerror(errno));
      return 1;
    }
    for (size_t got = 0; got < sizeof in;) {
      if (!await_alone(ep, fd, EPOLLIN)) {
        std::fprintf(stderr, "client-reregister: round %d: no echo after %zu bytes\n", round, got);
        return 1;
      }
      ssize_t r = read(fd, in + got, sizeof in - got);
      if (r <= 0 && !(r < 0 && errno == EAGAIN)) return 1;
      if (r > 0) got += static_cast<size_t>(r);
    }
    if (std::memcmp(in, out, sizeof in) != 0) {
      std::fprintf(stderr, "client-reregister: round %d: the echo differs\n", round);
      return 1;
    }
    epoll_event stray{};
    if (int n = round % 2 == 0 ? epoll_wait(ep, &stray, 1, 0) : 0; n != 0) {
      std::fprintf(stderr, "client-reregister: round %d: an empty set reported %d events\n", round, n);
      return 1;
    }
  }
  close(ep);
  close(fd);
  std::printf("client-reregister: %d requests echoed equal, the set re-registered around each\n", rounds);
  return 0;
}

// The connection is shared by fork: the first bytes go before it, and their echo waits unread in this
// process when it forks; then the parent writes the rest and ends its sending side while the child
// reads and checks every byte that comes back.
int client_fork(const char* host, int port, uint64_t bytes, bool whole) {
  int fd = connect_to(host, port);
  if (fd < 0) return 1;
  const uint64_t head = std::min<uint64_t>(bytes, 200000);
  if (!write_pattern(fd, 0, head)) return 1;
  usleep(500000);
  pid_t child = fork();
  if (child == 0) {
    int error = 0;
    socklen_t len = sizeof error;
    if (whole && (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) != 0 || error != 0)) std::exit(1);
    uint64_t got = 0;
    bool ok = read_pattern(fd, bytes, &got);
    std::printf("child: %llu of %llu bytes came back, %s\n", static_cast<unsigned long long>(got),
                static_cast<unsigned long long>(bytes), ok ? "all equal" : "NOT ALL, OR SOME DIFFER");
    std::exit(ok ? 0 : 1);
  }
  bool sent = write_pattern(fd, head, bytes) && shutdown(fd, SHUT_WR) == 0;
  close(fd);  // the child's copy goes on
  int status = 0;
  waitpid(child, &status, 0);
  std::printf("parent: wrote the rest after the fork: %s\n", sent ? "ok" : "FAILED");
  return sent && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

// A thread of this process sleeps on the connection, in read() or in epoll_wait(), with nothing to
// read, when another thread forks (the child exits at once, like a helper that never touches the
// connection). The fork moves the connection back to TCP under the sleeping thread, which must then
// go on with the socket: the parent writes `bytes` after the fork and the sleeper checks their echo.
int client_fork_under_sleeper(const char* host, int port, uint64_t bytes, std::string_view how) {
  int fd = connect_to(host, port);
  if (fd < 0) return 1;
  std::atomic<bool> ok{false};
  std::thread sleeper([&] {
    int ep = -1;
    if (how == "epoll") {
      ep = epoll_create1(0);
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = 77;
      if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) return;
    }
    std::vector<char> in(65536);
    uint64_t pos = 0;
    bool same = true;
    while (pos < bytes) {
      if (ep >= 0) {
        epoll_event got{};
        int n = epoll_wait(ep, &got, 1, -1);
        if (n != 1 || got.data.u64 != 77) {
          std::fprintf(stderr, "sleeper (epoll): epoll_wait returned %d (%s), data %llu, events %#x\n", n,
                       n < 0 ? strerror(errno) : "-", static_cast<unsigned long long>(got.data.u64), got.events);
          break;
        }
      }
      ssize_t r = read(fd, in.data(), in.size());
      if (r <= 0) {
        std::fprintf(stderr, "sleeper (%s): read returned %zd (%s)\n", std::string(how).c_str(), r,
                     r < 0 ? strerror(errno) : "the end");
        break;
      }
      for (ssize_t i = 0; i < r; ++i) same &= in[static_cast<size_t>(i)] == pattern(pos + static_cast<uint64_t>(i));
      pos += static_cast<uint64_t>(r);
    }
    std::printf("sleeper (%s): %llu of %llu bytes came back, %s\n", std::string(how).c_str(),
                static_cast<unsigned long long>(pos), static_cast<unsigned long long>(bytes),
                same ? "all equal" : "SOME DIFFER");
    ok = same && pos == bytes;
  });
  usleep(300000);  // the sleeper is asleep on an empty connection
  pid_t child = fork();
  if (child == 0) _exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  bool sent = write_pattern(fd, 0, bytes) && shutdown(fd, SHUT_WR) == 0;
  sleeper.join();
  close(fd);
  return sent && ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string_view role = argc > 1 ? argv[1] : "";
  if ((argc == 4 || argc == 5) && role == "server") {
    g_blocks = argc == 5 && std::string_view(argv[4]) == "blocks";
    return server(std::atoi(argv[2]), argv[3]);
  }
  if (argc == 5 && role == "client-blocks") return client_blocks(argv[2], std::atoi(argv[3]), std::atoi(argv[4]));
  if (argc == 5 && role == "client") return client(argv[2], std::atoi(argv[3]), std::strtoull(argv[4], nullptr, 10));
  if (argc == 6 && role == "client-fork-under") {
    return client_fork_under_sleeper(argv[2], std::atoi(argv[3]), std::strtoull(argv[4], nullptr, 10), argv[5]);
  }
  if (argc == 5 && (role == "client-fork" || role == "client-fork-whole")) {
    return client_fork(argv[2], std::atoi(argv[3]), std::strtoull(argv[4], nullptr, 10), role == "client-fork-whole");
  }
  if (argc == 5 && role == "client-reregister") return client_reregister(argv[2], std::atoi(argv[3]), std::atoi(argv[4]));
  if (argc == 5 && role == "client-epoll") {
    return client_epoll(argv[2], std::atoi(argv[3]), std::strtoull(argv[4], nullptr, 10));
  }
  std::fprintf(stderr, "usage: see the comment at the top of epoll_echo.cpp\n");
  return 2;
}
