// prefork_echo PORT CONNECTIONS [WORKERS]: the shape of a pre-fork server (nginx, Apache's prefork),
// to run under the shim. The parent listens, forks WORKERS workers (1 unless given) and never
// accepts; each worker accepts connections one after the other and echoes each until its client
// half-closes, then closes it, and prints a line saying so.
// With CONNECTIONS > 0 each worker stops accepting after that many and reports to the parent (but
// stays alive, as a server's workers do); once every worker has reported, the parent ends them and
// exits non-zero unless all succeeded. With several workers blocked in accept(), the kernel hands
// sequential connections to them in turn, and a worker that is done accepts no more: so
// WORKERS x CONNECTIONS sequential clients reach every worker.
// With CONNECTIONS = 0 the workers serve until the parent gets SIGTERM, which ends them all.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "test_sockets.h"

namespace {

volatile sig_atomic_t g_terminate = 0;

bool serve_one(int listener, int index) {
  int fd = accept(listener, nullptr, nullptr);
  if (fd < 0) return false;
  bool ok = tcp2rdma::test::echo_until_end(fd);
  close(fd);
  std::printf("worker %d: connection %d %s\n", static_cast<int>(getpid()), index, ok ? "echoed to its end" : "FAILED");
  std::fflush(stdout);
  return ok;
}

int worker(int listener, int connections, int report) {
  bool ok = true;
  for (int i = 1; ok && (connections == 0 || i <= connections); ++i) ok = serve_one(listener, i);
  char verdict = ok ? 'y' : 'n';
  if (write(report, &verdict, 1) != 1) return 1;
  for (;;) pause();  // a server's worker outlives its work; the parent ends it
}

void end_workers(const std::vector<pid_t>& workers) {
  for (pid_t w : workers) kill(w, SIGTERM);
  for (pid_t w : workers) waitpid(w, nullptr, 0);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: prefork_echo PORT CONNECTIONS [WORKERS]\n");
    return 2;
  }
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::atoi(argv[1])));
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(listener, 16) != 0) {
    std::perror("prefork_echo: listen");
    return 1;
  }
  int connections = std::atoi(argv[2]);
  int count = argc == 4 ? std::atoi(argv[3]) : 1;
  int report[2];
  if (pipe(report) != 0) return 1;
  struct sigaction on_term {};
  on_term.sa_handler = [](int) { g_terminate = 1; };
  sigaction(SIGTERM, &on_term, nullptr);  // not SA_RESTART: read() below returns
  std::vector<pid_t> workers;
  for (int i = 0; i < count; ++i) {
    pid_t child = fork();
    if (child == 0) {
      signal(SIGTERM, SIG_DFL);
      std::exit(worker(listener, connections, report[1]));
    }
    if (child < 0) return 1;
    workers.push_back(child);
  }
  int succeeded = 0, reported = 0;
  char verdict = 0;
  while (!g_terminate && (connections == 0 || reported < count) && read(report[0], &verdict, 1) == 1) {
    ++reported;
    if (verdict == 'y') ++succeeded;
  }
  end_workers(workers);
  if (connections == 0) return reported == 0 ? 0 : 1;  // a worker reports only when it failed
  return succeeded == count ? 0 : 1;
}
