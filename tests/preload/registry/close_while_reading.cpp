// close_while_reading: one thread closes a connection while another is blocked reading it.
//   close_while_reading server PORT       accepts one connection, waits 2 s, writes "late bytes", closes.
//   close_while_reading client HOST PORT  connects; a thread blocks in read(); the main thread closes
//       the descriptor 0.5 s later, then waits for the reader.
// Linux keeps a socket alive while a call is still using it: the blocked read goes on and returns
// the late bytes; close() only took the descriptor away. Under the shim the stream must likewise
// outlive the close until the reader has returned (it must not be freed under the reader).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "test_sockets.h"

namespace {

using tcp2rdma::test::connect_retrying;

int serve(const char* port) {
  int fd = tcp2rdma::test::accept_one_announced(port);
  if (fd < 0) return 1;
  sleep(2);
  const char late[] = "late bytes";
  bool ok = write(fd, late, sizeof late - 1) == static_cast<ssize_t>(sizeof late - 1);
  close(fd);
  return ok ? 0 : 1;
}

int client(const char* ip, const char* port) {
  int fd = connect_retrying(ip, port);
  if (fd < 0) return 1;
  std::string got;
  std::thread reader([&] {
    char buffer[64];
    ssize_t n = read(fd, buffer, sizeof buffer);
    if (n > 0) got.assign(buffer, static_cast<size_t>(n));
    std::printf("reader: read returned %zd%s%s\n", n, n > 0 ? ": " : "", got.c_str());
  });
  usleep(500000);
  int rc = close(fd);
  std::printf("main: close returned %d while the reader was blocked\n", rc);
  reader.join();
  return got == "late bytes" ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "server") == 0) return serve(argv[2]);
  if (argc == 4 && std::strcmp(argv[1], "client") == 0) return client(argv[2], argv[3]);
  std::fprintf(stderr, "usage: close_while_reading server PORT | client HOST PORT\n");
  return 2;
}
