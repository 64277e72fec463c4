// exec of a process holding an upgraded connection (run under the shim, a rule selecting RDMA).
//   exec_writer send ADDR PORT cloexec|inherit  connects (the socket close-on-exec, or not), writes
//       4 MiB without waiting, then execs itself at once as `after-exec`: bytes are still in flight.
//   exec_writer after-exec FD cloexec|inherit   the new program: it must hold no RDMA descriptor of
//       the old image; a close-on-exec socket must be gone (EBADF), an inherited one must fail loudly
//       (a write fails) rather than pass for a working connection.
//   exec_writer receive PORT [IDLE_S]           says "listening" on standard error, accepts one
//       connection, (after IDLE_S seconds without a call) copies what arrives to standard output and
//       says on standard error how it ended: "end: eof" or "end: reset". (Also the receiver of
//       integration.peer_killed.pair and integration.fork_peer_idle.pair.)
//   exec_writer expect                          writes the 4 MiB the sender writes, for cmp.
// With kernel TCP the receiver gets the 4 MiB and then EOF (cloexec: exec closed the last descriptor)
// or, inherit, EOF once the new program exits. Over RDMA: cloexec must give the same; inherit must
// deliver the 4 MiB and then a reset (the stream could not follow the descriptor), never a clean end.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
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

#include "test_sockets.h"

namespace {

constexpr size_t kBytes = 4 << 20;

std::vector<char> pattern() {
  std::vector<char> v(kBytes);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<char>((i * 2654435761u) >> 13);
  return v;
}

using tcp2rdma::test::connect_retrying;

int send_then_exec(const char* self, const char* ip, const char* port, const std::string& mode) {
  int fd = connect_retrying(ip, port, SOCK_STREAM | (mode == "cloexec" ? SOCK_CLOEXEC : 0));
  if (fd < 0) return 1;
  std::vector<char> bytes = pattern();
  for (size_t done = 0; done < bytes.size();) {
    ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) return 1;
    done += static_cast<size_t>(n);
  }
  std::string fd_text = std::to_string(fd);
  execl(self, self, "after-exec", fd_text.c_str(), mode.c_str(), static_cast<char*>(nullptr));
  std::perror("execl");
  return 1;
}

// Descriptors of the RDMA stack (uverbs, rdma_cm, their event channels) this process holds.
int rdma_descriptors() {
  int found = 0;
  DIR* dir = opendir("/proc/self/fd");
  while (dirent* entry = readdir(dir)) {
    char target[256] = {};
    std::string path = std::string("/proc/self/fd/") + entry->d_name;
    if (readlink(path.c_str(), target, sizeof target - 1) <= 0) continue;
    if (std::strstr(target, "infiniband") != nullptr || std::strstr(target, "uverbs") != nullptr) {
      std::printf("after-exec: fd %s is %s\n", entry->d_name, target);
      ++found;
    }
  }
  closedir(dir);
  return found;
}

int after_exec(int fd, const std::string& mode) {
  signal(SIGPIPE, SIG_IGN);
  bool ok = rdma_descriptors() == 0;
  if (mode == "cloexec") {
    bool closed = fcntl(fd, F_GETFD) < 0 && errno == EBADF;
    std::printf("after-exec: close-on-exec socket %s\n", closed ? "is gone" : "IS STILL OPEN");
    ok = ok && closed;
  } else {
    const char x[] = "bytes of the new program";
    ssize_t n = write(fd, x, sizeof x);
    std::printf("after-exec: write on the inherited socket returned %zd (%s)\n", n,
                n < 0 ? std::strerror(errno) : "it must fail");
    ok = ok && n < 0;
  }
  return ok ? 0 : 1;
}

int receive(const char* port, int idle_seconds) {
  int fd = tcp2rdma::test::accept_one_announced(port);
  if (fd < 0) return 1;
  sleep(static_cast<unsigned>(idle_seconds));  // makes no call at all meanwhile
  char buffer[65536];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof buffer)) > 0) fwrite(buffer, 1, static_cast<size_t>(n), stdout);
  std::fprintf(stderr, "end: %s\n", n == 0 ? "eof" : errno == ECONNRESET ? "reset" : std::strerror(errno));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string command = argc > 1 ? argv[1] : "";
  if (command == "send" && argc == 5) return send_then_exec(argv[0], argv[2], argv[3], argv[4]);
  if (command == "after-exec" && argc == 4) return after_exec(std::atoi(argv[2]), argv[3]);
  if (command == "receive" && (argc == 3 || argc == 4)) return receive(argv[2], argc == 4 ? std::atoi(argv[3]) : 0);
  if (command == "expect") {
    std::vector<char> bytes = pattern();
    fwrite(bytes.data(), 1, bytes.size(), stdout);
    return 0;
  }
  std::fprintf(stderr, "usage: see the comment at the top of exec_writer.cpp\n");
  return 2;
}
