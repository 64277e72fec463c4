// The kernel's byte counts `stat` shows for connections on TCP (tools/stats_view/kernel_tcp.h), read
// from a real loopback connection of this test.
#include "stats_view/kernel_tcp.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace tcp2rdma::tools::stats_view {
namespace {

std::string name(const sockaddr_in& a) {
  return stats::format_address(AF_INET, reinterpret_cast<const uint8_t*>(&a.sin_addr), ntohs(a.sin_port));
}

TEST(KernelTcp, AConnectionsBytesAreTheKernelsOwnCountsOnEachSide) {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof at;
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&at), sizeof at), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&at), &len), 0);
  int client = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(client, reinterpret_cast<sockaddr*>(&at), sizeof at), 0);
  int server = accept(listener, nullptr, nullptr);
  ASSERT_GE(server, 0);
  char bytes[1000] = {};
  ASSERT_EQ(send(client, bytes, sizeof bytes, 0), 1000);
  size_t got = 0;
  while (got < sizeof bytes) got += static_cast<size_t>(recv(server, bytes, sizeof bytes, 0));
  sockaddr_in mine{}, theirs{};
  len = sizeof mine;
  getsockname(client, reinterpret_cast<sockaddr*>(&mine), &len);
  len = sizeof theirs;
  getpeername(client, reinterpret_cast<sockaddr*>(&theirs), &len);

  std::vector<stats::ProcessView> views(1);
  stats::ConnectionView c;
  c.client = true;
  c.path = stats::SlotPath::kTcp;
  c.local = name(mine);
  c.remote = name(theirs);
  stats::ConnectionView s = c;
  s.client = false;
  s.local = c.remote;
  s.remote = c.local;
  views[0].connections = {c, s};
  for (int i = 0; i < 100 && views[0].connections[1].tcp_bytes_in < 1000; ++i) {
    views[0].connections = {c, s};
    use_kernel_tcp_bytes(&views);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(views[0].connections[0].tcp_bytes_out, 1000u);  // no SYN: application bytes only
  EXPECT_EQ(views[0].connections[0].tcp_bytes_in, 0u);
  EXPECT_EQ(views[0].connections[1].tcp_bytes_in, 1000u);
  EXPECT_EQ(views[0].connections[1].tcp_bytes_out, 0u);
  // After the client's end (its FIN, one sequence number the kernel counts on both sides) the same.
  shutdown(client, SHUT_WR);
  ASSERT_EQ(recv(server, bytes, sizeof bytes, 0), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  views[0].connections = {c, s};
  use_kernel_tcp_bytes(&views);
  EXPECT_EQ(views[0].connections[0].tcp_bytes_out, 1000u);
  EXPECT_EQ(views[0].connections[1].tcp_bytes_in, 1000u);
  // A row on RDMA keeps the module's counts.
  views[0].connections[0].path = stats::SlotPath::kRdma;
  views[0].connections[0].tcp_bytes_out = 5;
  use_kernel_tcp_bytes(&views);
  EXPECT_EQ(views[0].connections[0].tcp_bytes_out, 5u);
  close(client);
  close(server);
  close(listener);
}

}  // namespace
}  // namespace tcp2rdma::tools::stats_view
