// accept_fork_echo PORT MODE [PAUSE_MS]: the shape of an accept-then-fork server (socat's fork,
// inetd, PostgreSQL's postmaster). It accepts one connection and forks (at once, or after PAUSE_MS);
// the parent keeps its copy open until the child is done. The child serves the connection it
// inherited, by MODE:
//   fork   echoes until the client half-closes, then closes;
//   handoff       the same, but the parent closes its copy at once and the child starts 300 ms later
//                 (the postmaster's shape: the parent lets go before the child first uses it);
//   handoff-exit  the parent exits at once without closing, the child starts 300 ms later;
//   handoff-late  the child starts at once, the parent closes its copy 300 ms after the fork (the
//                 child claims the connection while the parent still holds it);
//   handoff-family  handoff, by a server that forked a helper before it accepted (PostgreSQL's
//                 auxiliary processes), which makes its listener a pre-fork family's;
//   exec   makes the connection its standard input and output and runs cat, which echoes (inetd);
//   spawn  the same cat, started with posix_spawnp and file actions that dup2 the connection onto
//          its standard input and output (no fork of ours: the file actions hand the socket on);
//          the parent closes its copy at once.
//   idle-child  the parent serves instead, from an epoll loop it set up before the fork (redis's
//          shape), and the child never touches the connection (redis's BGSAVE child): it sleeps
//          2 s and exits.
// Under `upgrade: background` with no pause, the fork comes before the connection could switch: it
// stays TCP. Under `upgrade: before-return` it is on RDMA when accept() returns, and the fork moves
// it back to TCP (docs/architecture.md, "Back to TCP"); with a pause, the client's first bytes have
// arrived on the stream unread by then and must reach the child (and cat, through exec) first.
// The client checks the echoed bytes.
#include <spawn.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "test_sockets.h"

extern char** environ;

namespace {

int serve(int fd, bool exec_cat) {
  if (!exec_cat) {
    bool ok = tcp2rdma::test::echo_until_end(fd);
    close(fd);
    std::printf("child: %s\n", ok ? "echoed the connection to its end" : "FAILED");
    return ok ? 0 : 1;
  }
  if (dup2(fd, 0) < 0 || dup2(fd, 1) < 0) return 1;
  close(fd);
  execlp("cat", "cat", static_cast<char*>(nullptr));
  std::perror("accept_fork_echo: exec cat");
  return 1;
}

// posix_spawnp("cat") with fd as its standard input and output; cat's exit status.
int spawn_cat(int fd) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fd, 0);
  posix_spawn_file_actions_adddup2(&actions, fd, 1);
  char cat[] = "cat";
  char* argv[] = {cat, nullptr};
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, "cat", &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fd);
  if (rc != 0) {
    std::fprintf(stderr, "accept_fork_echo: posix_spawnp: %s\n", std::strerror(rc));
    return 1;
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

// The echo from an event loop: fd is in `epfd`'s set (level-triggered EPOLLIN) from before the fork.
bool echo_from_epoll(int epfd, int fd) {
  for (;;) {
    epoll_event ev{};
    int n = epoll_wait(epfd, &ev, 1, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n != 1) return false;
    char buffer[65536];
    ssize_t got = read(fd, buffer, sizeof buffer);
    if (got == 0) return true;
    if (got < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return false;
    }
    for (ssize_t done = 0; done < got;) {
      ssize_t w = write(fd, buffer + done, static_cast<size_t>(got - done));
      if (w <= 0) return false;
      done += w;
    }
  }
}

// The child that never touches the connection: a snapshot's worth of sleep, then exit() (the
// module's exit hooks run, as they do when redis's child ends).
int idle_child_then_echo(int fd, int listener) {
  int epfd = epoll_create1(0);
  epoll_event ev{EPOLLIN, {.fd = fd}};
  if (epfd < 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) != 0) return 1;
  pid_t child = fork();
  if (child == 0) {
    close(listener);
    sleep(2);
    std::exit(0);
  }
  bool ok = echo_from_epoll(epfd, fd);
  close(fd);
  int status = 0;
  waitpid(child, &status, 0);
  std::printf("parent: %s; the idle child %s\n", ok ? "echoed the connection to its end" : "FAILED",
              WIFEXITED(status) && WEXITSTATUS(status) == 0 ? "exited" : "FAILED");
  return ok && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

// A helper process forked before the first accept, as PostgreSQL's postmaster forks its auxiliary
// processes: it closes its copy of the listener and idles until the server is gone.
void start_helper(int listener) {
  pid_t server = getpid();
  if (fork() != 0) return;
  close(listener);
  for (int i = 0; i < 1200 && getppid() == server; ++i) usleep(50000);
  _exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc >= 3 ? argv[2] : "";
  bool family = std::strcmp(mode, "handoff-family") == 0;
  bool handoff = family || std::strcmp(mode, "handoff") == 0, handoff_exit = std::strcmp(mode, "handoff-exit") == 0;
  bool handoff_late = std::strcmp(mode, "handoff-late") == 0;
  bool idle_child = std::strcmp(mode, "idle-child") == 0;
  if (argc < 3 || argc > 4 ||
      (std::strcmp(mode, "fork") != 0 && std::strcmp(mode, "exec") != 0 && std::strcmp(mode, "spawn") != 0 &&
       !handoff && !handoff_exit && !handoff_late && !idle_child)) {
    std::fprintf(stderr, "usage: accept_fork_echo PORT fork|handoff|handoff-family|handoff-exit|handoff-late|exec|spawn|"
                 "idle-child [PAUSE_MS]\n");
    return 2;
  }
  int listener = tcp2rdma::test::listen_on(argv[1]);
  if (listener < 0) {
    std::perror("accept_fork_echo: listen");
    return 1;
  }
  if (family) start_helper(listener);
  std::fprintf(stderr, "listening\n");
  int fd = accept(listener, nullptr, nullptr);
  if (fd < 0) return 1;
  if (argc == 4) usleep(static_cast<useconds_t>(std::atoi(argv[3])) * 1000);
  if (std::strcmp(argv[2], "spawn") == 0) return spawn_cat(fd);
  if (idle_child) return idle_child_then_echo(fd, listener);
  pid_t child = fork();
  if (child == 0) {
    close(listener);
    if (handoff || handoff_exit) usleep(300000);
    std::exit(serve(fd, std::strcmp(mode, "exec") == 0));
  }
  if (handoff_exit) return 0;  // exit() with the connection open: the child carries it on
  if (handoff_late) usleep(300000);
  if (handoff || handoff_late) close(fd);
  int status = 0;
  waitpid(child, &status, 0);
  if (!handoff && !handoff_late) close(fd);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
