// The kernel's byte counts of a TCP socket (preload/upgrade/kernel_tcp_counts.h) on loopback: what
// one side wrote and the other read, with data in flight, unread, and after each side's FIN; the
// connecting side's SYN is the one constant difference.
#include "upgrade/kernel_tcp_counts.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>

#include "test_sockets.h"

namespace tcp2rdma::preload {
namespace {

KernelTcpCounts counts(int fd) {
  KernelTcpCounts k;
  EXPECT_TRUE(kernel_tcp_counts(fd, &k));
  return k;
}

// Waits until the peer's bytes (or its FIN) have all arrived: the counts are the kernel's at a moment,
// and loopback delivers within the call, but an ACK may lag.
void settle() { ::poll(nullptr, 0, 50); }

void write_all(int fd, size_t n, char c) {
  std::string bytes(n, c);
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::send(fd, bytes.data() + done, n - done, 0);
    ASSERT_GT(r, 0);
    done += static_cast<size_t>(r);
  }
}

size_t read_some(int fd, size_t most) {
  std::string buffer(most, '\0');
  size_t done = 0;
  while (done < most) {
    ssize_t r = ::recv(fd, buffer.data() + done, most - done, 0);
    if (r <= 0) break;
    done += static_cast<size_t>(r);
  }
  return done;
}

TEST(KernelTcpCounts, BothSidesCountWhatMovedAndTheConnectorsSynOnce) {
  int client = -1, server = -1;
  ASSERT_TRUE(test::loopback_connection(&client, &server));
  KernelTcpCounts c0 = counts(client), s0 = counts(server);
  EXPECT_EQ(s0.written, 0u);
  EXPECT_EQ(s0.read, 0u);
  EXPECT_EQ(c0.read, 0u);
  uint64_t syn = c0.written;  // Linux: 1 (the SYN); whatever it is, it must not change
  EXPECT_LE(syn, 1u);

  write_all(client, 100000, 'c');
  write_all(server, 3000, 's');
  settle();
  EXPECT_EQ(counts(client).written, syn + 100000);
  EXPECT_EQ(counts(server).written, 3000u);
  EXPECT_EQ(counts(server).read, 0u) << "nothing read yet: the bytes wait in the queue";

  EXPECT_EQ(read_some(server, 40000), 40000u);
  EXPECT_EQ(counts(server).read, 40000u);
  EXPECT_EQ(read_some(client, 3000), 3000u);
  EXPECT_EQ(counts(client).read, 3000u);

  // The client's FIN: its count leaves it out, and so does the server's, read or not.
  write_all(client, 500, 'e');
  ASSERT_EQ(::shutdown(client, SHUT_WR), 0);
  settle();
  EXPECT_EQ(counts(client).written, syn + 100500);
  EXPECT_EQ(counts(server).read, 40000u);
  EXPECT_EQ(read_some(server, 1 << 20), 60500u);
  EXPECT_EQ(counts(server).read, 100500u);
  EXPECT_EQ(counts(server).written, 3000u);
  ::close(client);
  ::close(server);
}

// What this side wrote and read does not change while the peer reads what it wrote (acknowledgements
// arrive) and sends more (segments arrive): every look must say the same, however the kernel's
// updates fall between its calls.
TEST(KernelTcpCounts, TheCountsHoldStillWhileOnlyThePeerMovesBytes) {
  int client = -1, server = -1;
  ASSERT_TRUE(test::loopback_connection(&client, &server));
  // Large queues on the client, a small receive buffer on the server: the client's bytes drain (and
  // are acknowledged) slowly while the server reads, and the server's pile up unread at the client.
  int large = 8 << 20, small = 4096;
  ASSERT_EQ(::setsockopt(client, SOL_SOCKET, SO_SNDBUF, &large, sizeof large), 0);
  ASSERT_EQ(::setsockopt(client, SOL_SOCKET, SO_RCVBUF, &large, sizeof large), 0);
  ASSERT_EQ(::setsockopt(server, SOL_SOCKET, SO_RCVBUF, &small, sizeof small), 0);
  uint64_t syn = counts(client).written;
  std::string bytes(1 << 16, 'c');
  uint64_t written = 0;
  for (ssize_t r; (r = ::send(client, bytes.data(), bytes.size(), MSG_DONTWAIT)) > 0;) written += static_cast<uint64_t>(r);
  ASSERT_GT(written, 1u << 20);
  std::atomic<bool> stop{false};
  std::thread peer([&] {
    std::string piece(256, 's');
    char sink[512];
    while (!stop.load()) {
      ::recv(server, sink, sizeof sink, MSG_DONTWAIT);            // acknowledgements for the client
      ::send(server, piece.data(), piece.size(), MSG_DONTWAIT);  // segments for the client
    }
  });
  int differing = 0, looks = 0;
  for (int i = 0; i < 20000; ++i) {
    KernelTcpCounts k;
    if (!kernel_tcp_counts(client, &k)) continue;  // never held still: allowed, not wrong
    ++looks;
    if (k.written != syn + written || k.read != 0) ++differing;
  }
  stop.store(true);
  peer.join();
  EXPECT_GT(looks, 1000);  // most looks find the counts still
  EXPECT_EQ(differing, 0);
  ::close(client);
  ::close(server);
}

TEST(KernelTcpCounts, NoCountsForWhatIsNotAConnectedTcpSocket) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  KernelTcpCounts k{7, 7};
  EXPECT_FALSE(kernel_tcp_counts(fds[0], &k));
  EXPECT_EQ(k.written, 7u);
  int tcp = ::socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_FALSE(kernel_tcp_counts(tcp, &k)) << "a socket never connected";
  ::close(fds[0]);
  ::close(fds[1]);
  ::close(tcp);
}

}  // namespace
}  // namespace tcp2rdma::preload
