// fork_writer ADDR PORT [FIRST]: a client run under the shim with a rule selecting RDMA, to test fork.
// It connects (upgraded), writes 1 MiB (or FIRST bytes), pauses 500 ms, forks; the child must find its
// inherited connection failing loudly (a write fails; it never reaches the parent's RDMA resources)
// and exits; the parent writes another 1 MiB after the child's exit and closes. The receiver (nc) must
// get exactly the 2 MiB the parent wrote: the child neither added bytes nor ended the parent's stream.
// The bytes are a fixed pattern: `fork_writer --expect [FIRST]` writes the same bytes to standard
// output for the comparison.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

std::vector<char> pattern(size_t n, unsigned seed) {
  std::vector<char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<char>((i * 131 + seed * 7) >> 3);
  return v;
}

bool write_all(int fd, const std::vector<char>& v) {
  for (size_t done = 0; done < v.size();) {
    ssize_t n = write(fd, v.data() + done, v.size() - done);
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  bool expect = argc >= 2 && std::strcmp(argv[1], "--expect") == 0;
  // The size of the first part: the last argument when there is one more than usual.
  size_t first_size = (expect && argc == 3) || (!expect && argc == 4) ? std::strtoul(argv[argc - 1], nullptr, 10) : 1 << 20;
  std::vector<char> first = pattern(first_size, 1), second = pattern(1 << 20, 2);
  if (expect) {
    fwrite(first.data(), 1, first.size(), stdout);
    fwrite(second.data(), 1, second.size(), stdout);
    return 0;
  }
  if (argc != 3 && argc != 4) return 2;
  signal(SIGPIPE, SIG_IGN);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::atoi(argv[2])));
  inet_pton(AF_INET, argv[1], &addr.sin_addr);
  int fd = -1;
  for (int attempt = 0; attempt < 50; ++attempt) {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) break;
    close(fd);
    fd = -1;
    usleep(200000);
  }
  if (fd < 0 || !write_all(fd, first)) return 1;
  // The peer's module may still be at its upgrade's end for a moment (its engine looks at the link,
  // and would answer a move then); a peer that makes no call is idle only after it.
  usleep(500000);
  pid_t child = fork();
  if (child == 0) {
    const char x[] = "child bytes must never arrive";
    ssize_t n = write(fd, x, sizeof x);
    std::printf("child: write on the inherited connection returned %zd (%s)\n", n, n < 0 ? strerror(errno) : "-");
    std::exit(n < 0 ? 0 : 1);  // exit(): runs the module's exit hook, which must leave the parent's stream be
  }
  int status = 0;
  waitpid(child, &status, 0);
  bool child_ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  bool ok = write_all(fd, second) && shutdown(fd, SHUT_WR) == 0;
  char c;
  while (read(fd, &c, 1) > 0) {
  }
  close(fd);
  std::printf("parent: child %s, parent wrote 2 MiB: %s\n", child_ok ? "failed loudly as it must" : "DID NOT FAIL",
              ok ? "ok" : "FAILED");
  return ok && child_ok ? 0 : 1;
}
