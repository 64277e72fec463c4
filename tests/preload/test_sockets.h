// Small socket helpers shared by the preload test programs that run in the Soft-RoCE VM.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace tcp2rdma::test {

inline sockaddr_in ipv4_address(const char* ip, const char* port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::atoi(port)));
  inet_pton(AF_INET, ip, &addr.sin_addr);
  return addr;
}

// Binds fd to a port the kernel picks on 127.0.0.1; *addr is then the address to connect to.
inline bool bind_loopback(int fd, sockaddr_in* addr) {
  *addr = sockaddr_in{};
  addr->sin_family = AF_INET;
  addr->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof *addr;
  return bind(fd, reinterpret_cast<sockaddr*>(addr), sizeof *addr) == 0 &&
         getsockname(fd, reinterpret_cast<sockaddr*>(addr), &len) == 0;
}

// A TCP connection on loopback: *client connected to *server (accepted); false on failure.
inline bool loopback_connection(int* client, int* server) {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  bool ok = bind_loopback(listener, &addr) && listen(listener, 1) == 0;
  *client = socket(AF_INET, SOCK_STREAM, 0);
  ok = ok && connect(*client, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  *server = ok ? accept(listener, nullptr, nullptr) : -1;
  close(listener);
  return ok && *server >= 0;
}

// A listening TCP socket on every address at `port` (SO_REUSEADDR), backlog 1; -1 on failure.
inline int listen_on(const char* port) {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr = ipv4_address("0.0.0.0", port);
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(listener, 1) != 0) return -1;
  return listener;
}

// The server half of a two-guest test: listens on `port`, says "listening" on standard error (what
// integration/guest/wait-listening.sh waits for), and accepts one connection; -1 on failure.
inline int accept_one_announced(const char* port) {
  int listener = listen_on(port);
  if (listener < 0) return -1;
  std::fprintf(stderr, "listening\n");
  return accept(listener, nullptr, nullptr);
}

// A connected TCP socket of `type` (SOCK_STREAM, maybe | SOCK_CLOEXEC), retrying every 100 ms for
// about 10 s while the server is not listening yet; -1 if it never is.
inline int connect_retrying(const char* ip, const char* port, int type = SOCK_STREAM) {
  sockaddr_in addr = ipv4_address(ip, port);
  for (int attempt = 0; attempt < 100; ++attempt) {
    int fd = socket(AF_INET, type, 0);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) return fd;
    close(fd);
    usleep(100000);
  }
  return -1;
}

// Writes back everything read from fd until its peer ends its sending side; false on an error.
inline bool echo_until_end(int fd) {
  char buffer[65536];
  for (;;) {
    ssize_t n = read(fd, buffer, sizeof buffer);
    if (n == 0) return true;
    if (n < 0) return false;
    for (ssize_t done = 0; done < n;) {
      ssize_t w = write(fd, buffer + done, static_cast<size_t>(n - done));
      if (w <= 0) return false;
      done += w;
    }
  }
}

}  // namespace tcp2rdma::test
