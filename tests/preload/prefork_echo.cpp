// prefork_echo PORT CONNECTIONS: the shape of a pre-fork server (nginx, Apache's prefork), to run
// under the shim. The parent listens, forks one worker and never accepts; the worker accepts
// CONNECTIONS connections one after the other and echoes each until its client half-closes, then
// closes it. The parent exits with the worker's status. The client checks the echoed bytes.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "test_sockets.h"

namespace {

int worker(int listener, int connections) {
  for (int i = 0; i < connections; ++i) {
    int fd = accept(listener, nullptr, nullptr);
    if (fd < 0) return 1;
    bool ok = tcp2rdma::test::echo_until_end(fd);
    close(fd);
    std::printf("worker: connection %d %s\n", i + 1, ok ? "echoed to its end" : "FAILED");
    std::fflush(stdout);
    if (!ok) return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: prefork_echo PORT CONNECTIONS\n");
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
  pid_t child = fork();
  if (child == 0) std::exit(worker(listener, std::atoi(argv[2])));
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
