// signal_interrupt: what a signal does to a blocking call, as Linux defines it for TCP sockets.
//   signal_interrupt server PORT       accepts one connection; reads nothing for 3 s, writes "late",
//       waits 3 s more, then reads and counts everything until the client's end, and prints the count.
//   signal_interrupt client HOST PORT  connects, then:
//     1. a SIGALRM handler without SA_RESTART, alarm in 0.5 s, recv(): must fail with EINTR;
//     2. the handler with SA_RESTART, alarm in 0.5 s, recv(): must go on and return "late";
//     3. without SA_RESTART again, alarm in 1 s, one send() of 256 MiB (the server reads nothing
//        yet, so it cannot all go): must return a partial count (> 0, < 256 MiB), as Linux returns
//        what it took before the signal; then sends 1 MiB more, ends, and prints its total, which
//        the server's count must equal (the test script compares them).
// Run plainly it checks the kernel; under the shim, the module's stream must behave the same.
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "test_sockets.h"

namespace {

using tcp2rdma::test::connect_retrying;

volatile sig_atomic_t g_alarms = 0;

void on_alarm(int) { g_alarms = g_alarms + 1; }

void arm(int flags, long usec) {
  struct sigaction action {};
  action.sa_handler = on_alarm;
  action.sa_flags = flags;
  sigaction(SIGALRM, &action, nullptr);
  itimerval timer{};
  timer.it_value.tv_sec = usec / 1000000;
  timer.it_value.tv_usec = usec % 1000000;
  setitimer(ITIMER_REAL, &timer, nullptr);
}

int serve(const char* port) {
  int fd = tcp2rdma::test::accept_one_announced(port);
  if (fd < 0) return 1;
  sleep(3);
  if (send(fd, "late", 4, 0) != 4) return 1;
  sleep(3);  // the client's big send fills every buffer meanwhile
  std::vector<char> buffer(1 << 20);
  unsigned long long total = 0;
  for (;;) {
    ssize_t n = read(fd, buffer.data(), buffer.size());
    if (n < 0) {
      std::perror("server: read");
      return 1;
    }
    if (n == 0) break;
    total += static_cast<unsigned long long>(n);
  }
  std::printf("server: received %llu bytes\n", total);
  return 0;
}

int drive(const char* host, const char* port) {
  int fd = connect_retrying(host, port);
  if (fd < 0) return 1;
  char buf[16];
  arm(0, 500000);
  ssize_t n = recv(fd, buf, sizeof buf, 0);
  if (n != -1 || errno != EINTR || g_alarms != 1) {
    std::printf("client: 1. recv returned %zd (%s) after %d alarms; want -1 EINTR\n", n, std::strerror(errno),
                static_cast<int>(g_alarms));
    return 1;
  }
  std::printf("client: 1. recv failed with EINTR\n");
  std::fflush(stdout);
  arm(SA_RESTART, 500000);
  n = recv(fd, buf, 4, MSG_WAITALL);
  if (n != 4 || std::memcmp(buf, "late", 4) != 0 || g_alarms != 2) {
    std::printf("client: 2. recv returned %zd after %d alarms; want \"late\" after the restart\n", n,
                static_cast<int>(g_alarms));
    return 1;
  }
  std::printf("client: 2. recv went on through the alarm and returned the late bytes\n");
  const size_t big = size_t{256} << 20;
  std::vector<char> data(big, 'x');
  arm(0, 1000000);
  n = send(fd, data.data(), big, 0);
  if (n <= 0 || static_cast<size_t>(n) >= big || g_alarms != 3) {
    std::printf("client: 3. send returned %zd (%s) after %d alarms; want a partial count\n", n, std::strerror(errno),
                static_cast<int>(g_alarms));
    return 1;
  }
  unsigned long long total = static_cast<unsigned long long>(n);
  std::printf("client: 3. send was interrupted after %zd bytes\n", n);
  size_t more = 1 << 20, sent = 0;
  while (sent < more) {
    ssize_t m = send(fd, data.data() + sent, more - sent, 0);
    if (m <= 0) return 1;
    sent += static_cast<size_t>(m);
  }
  total += more;
  shutdown(fd, SHUT_WR);
  char end;
  if (read(fd, &end, 1) != 0) return 1;  // the server closes after counting
  close(fd);
  std::printf("client: sent %llu bytes\n", total);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "server") == 0) return serve(argv[2]);
  if (argc == 4 && std::strcmp(argv[1], "client") == 0) return drive(argv[2], argv[3]);
  std::fprintf(stderr, "usage: signal_interrupt server PORT | client HOST PORT\n");
  return 2;
}
