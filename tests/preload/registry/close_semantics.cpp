// close_semantics server PORT CASE | client ADDR PORT CASE: what the peer of a closing socket sees,
// the same over kernel TCP (a host test runs both ends on loopback without the shim, proving the
// expectations are the kernel's) and over an upgraded connection (a Soft-RoCE pair test, both ends
// under the shim). CASE:
//   orderly  the client writes 1 MiB and closes: the server reads exactly those bytes, then EOF.
//   linger0  the client writes 64 KiB, sets SO_LINGER {on, 0 s} and closes: the server reads a reset
//            (ECONNRESET), never a clean EOF, after at most the bytes written.
//   unread   the server sends 4 KiB the client never reads; the client closes: the server's next read
//            is a reset (a close that discards unread data resets the connection).
// Each run prints one line saying what the server saw; the exit status says whether it was expected.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr size_t kOrderlyBytes = 1 << 20;
constexpr size_t kLingerBytes = 64 << 10;
constexpr size_t kUnreadBytes = 4 << 10;

bool write_all(int fd, const char* p, size_t n) {
  for (size_t done = 0; done < n;) {
    ssize_t w = write(fd, p + done, n - done);
    if (w <= 0) return false;
    done += static_cast<size_t>(w);
  }
  return true;
}

bool read_exactly(int fd, char* p, size_t n) {
  for (size_t done = 0; done < n;) {
    ssize_t r = read(fd, p + done, n - done);
    if (r <= 0) return false;
    done += static_cast<size_t>(r);
  }
  return true;
}

// Reads until EOF or an error: the byte count, and 0 (EOF) or the errno that ended it.
std::pair<size_t, int> read_to_end(int fd) {
  std::vector<char> buf(64 << 10);
  size_t total = 0;
  for (;;) {
    ssize_t r = read(fd, buf.data(), buf.size());
    if (r == 0) return {total, 0};
    if (r < 0) {
      if (errno == EINTR) continue;
      return {total, errno};
    }
    total += static_cast<size_t>(r);
  }
}

int serve(uint16_t port, const std::string& mode) {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(listener, 4) != 0) {
    perror("close_semantics: listen");
    return 2;
  }
  if (port == 0) {
    // Port 0: the kernel picks a free one and the caller reads it from our first line, so a host
    // run never collides with another test's ephemeral port.
    socklen_t len = sizeof addr;
    getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
    std::printf("port %u\n", ntohs(addr.sin_port));
    std::fflush(stdout);
  }
  int fd = accept(listener, nullptr, nullptr);
  if (fd < 0) {
    perror("close_semantics: accept");
    return 2;
  }
  char go = 'g';
  if (mode == "unread") {
    std::vector<char> gift(kUnreadBytes, 'u');
    if (!write_all(fd, gift.data(), gift.size())) return 2;
  }
  if (!write_all(fd, &go, 1)) return 2;  // the client closes only after this: the connection is whole
  auto [bytes, error] = read_to_end(fd);
  printf("close_semantics %s: the server read %zu bytes, then %s\n", mode.c_str(), bytes,
         error == 0 ? "EOF" : strerror(error));
  if (mode == "orderly") return bytes == kOrderlyBytes && error == 0 ? 0 : 1;
  if (mode == "linger0") return bytes <= kLingerBytes && error == ECONNRESET ? 0 : 1;
  return bytes == 0 && error == ECONNRESET ? 0 : 1;  // unread
}

int connect_to(const char* host, uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  inet_pton(AF_INET, host, &addr.sin_addr);
  for (int attempt = 0; attempt < 100; ++attempt) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) return fd;
    close(fd);
    usleep(100000);
  }
  return -1;
}

int client(const char* host, uint16_t port, const std::string& mode) {
  int fd = connect_to(host, port);
  if (fd < 0) {
    perror("close_semantics: connect");
    return 2;
  }
  if (mode == "unread") {
    // Wait for the server's last byte without reading its 4 KiB: peek until all have arrived.
    std::vector<char> peek(kUnreadBytes + 1);
    for (int i = 0; i < 1000; ++i) {
      if (recv(fd, peek.data(), peek.size(), MSG_PEEK) == static_cast<ssize_t>(peek.size())) break;
      usleep(10000);
    }
    close(fd);
    return 0;
  }
  char go = 0;
  if (!read_exactly(fd, &go, 1)) return 2;
  std::vector<char> data(mode == "orderly" ? kOrderlyBytes : kLingerBytes, 'd');
  if (!write_all(fd, data.data(), data.size())) return 2;
  if (mode == "linger0") {
    linger reset{1, 0};
    if (setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset) != 0) return 2;
  }
  close(fd);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  if (argc == 4 && std::strcmp(argv[1], "server") == 0) {
    return serve(static_cast<uint16_t>(std::atoi(argv[2])), argv[3]);
  }
  if (argc == 5 && std::strcmp(argv[1], "client") == 0) {
    return client(argv[2], static_cast<uint16_t>(std::atoi(argv[3])), argv[4]);
  }
  fprintf(stderr, "usage: close_semantics server PORT CASE | client ADDR PORT CASE\n");
  return 2;
}
