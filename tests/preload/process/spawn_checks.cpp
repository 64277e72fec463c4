// spawn_checks HOST PORT: a connection upgraded to RDMA (run under the shim, before-return) and
// programs started with system(), popen() and posix_spawnp() while it is open. The new programs must
// not inherit its descriptor (a stream cannot go along; the idle TCP socket underneath would lose
// their bytes silently), while an ordinary pipe without FD_CLOEXEC is inherited as always; afterwards
// the descriptor is as it was (no FD_CLOEXEC) and the connection carries 1 MiB to an echo server and
// back, byte for byte.
#include <fcntl.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "test_sockets.h"

extern char** environ;

namespace {

// A shell test of whether the started shell has descriptor fd.
std::string has_fd(int fd) { return "[ -e /proc/$$/fd/" + std::to_string(fd) + " ]"; }

bool system_sees(int fd) { return std::system(has_fd(fd).c_str()) == 0; }

bool popen_sees(int fd) {
  std::string command = has_fd(fd) + " && echo inherited || echo absent";
  FILE* out = popen(command.c_str(), "r");
  char line[32] = "";
  if (out == nullptr || std::fgets(line, sizeof line, out) == nullptr) return true;
  pclose(out);
  return std::strncmp(line, "inherited", 9) == 0;
}

bool spawn_sees(int fd) {
  std::string command = has_fd(fd);
  char* argv[] = {const_cast<char*>("sh"), const_cast<char*>("-c"), command.data(), nullptr};
  pid_t pid = 0;
  if (posix_spawnp(&pid, "sh", nullptr, nullptr, argv, environ) != 0) return true;
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

bool echo_checks(int fd) {
  std::vector<char> data(1 << 20), back(data.size());
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7 + 3);
  size_t sent = 0, got = 0;
  while (sent < data.size()) {
    ssize_t n = send(fd, data.data() + sent, std::min<size_t>(65536, data.size() - sent), 0);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
    while (got < sent) {  // the echo server writes back as it reads: keep both sides moving
      ssize_t m = recv(fd, back.data() + got, back.size() - got, MSG_DONTWAIT);
      if (m <= 0) break;
      got += static_cast<size_t>(m);
    }
  }
  shutdown(fd, SHUT_WR);
  while (got < back.size()) {
    ssize_t m = recv(fd, back.data() + got, back.size() - got, 0);
    if (m <= 0) return false;
    got += static_cast<size_t>(m);
  }
  return back == data;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: spawn_checks HOST PORT\n");
    return 2;
  }
  int fd = tcp2rdma::test::connect_retrying(argv[1], argv[2]);
  int pipe_fds[2];
  if (fd < 0 || pipe(pipe_fds) != 0) return 1;
  bool ok = true;
  auto check = [&](const char* what, bool seen, bool want, const char* yes = "inherited",
                   const char* no = "not inherited") {
    std::printf("%s: %s%s\n", what, seen ? yes : no, seen == want ? "" : "  <-- WRONG");
    ok = ok && seen == want;
  };
  check("system(), the upgraded connection", system_sees(fd), false);
  check("popen(), the upgraded connection", popen_sees(fd), false);
  check("posix_spawnp(), the upgraded connection", spawn_sees(fd), false);
  check("system(), a pipe", system_sees(pipe_fds[0]), true);
  check("posix_spawnp(), a pipe", spawn_sees(pipe_fds[0]), true);
  check("FD_CLOEXEC on the connection afterwards", (fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0, false, "set", "clear");
  bool echoed = echo_checks(fd);
  std::printf("1 MiB echoed over the connection: %s\n", echoed ? "equal" : "DIFFERENT");
  return ok && echoed ? 0 : 1;
}
