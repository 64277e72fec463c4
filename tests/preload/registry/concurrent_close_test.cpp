// Calls on a descriptor while another thread closes it and the kernel gives its number to a new
// socket. The kernel keeps a socket alive for a call in progress, and an application may race a call
// with a close (badly written, but it must not crash the process): the module's state for the socket
// must not be freed under a wrapper that is using it. Run under ASan (integration/test-all), a
// wrapper that follows the table's answer without holding the socket fails here with a
// heap-use-after-free. (TSan reports the race of the calls with close() itself: it is this test's, on
// purpose.)
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "registry/fd_table.h"

namespace tcp2rdma::preload {
namespace {

TEST(ConcurrentClose, CallsRacingWithCloseOfTheirDescriptorTouchNoFreedState) {
  // The lowest free number: every socket() of the closer gets it again.
  const int number = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(number, 0);
  ASSERT_NE(fd_table().find(number), nullptr);
  close(number);

  constexpr uint64_t kCalls = 20000;
  std::atomic<uint64_t> calls_on_a_socket{0};
  std::atomic<bool> done{false};
  std::vector<std::thread> callers;
  for (int t = 0; t < 2; ++t) {
    callers.emplace_back([&, t] {
      char byte = 0;
      linger off{0, 0};
      int on = 1;
      while (!done.load()) {
        // Each goes through a wrapper that reads or writes the socket's state after the real call.
        bool ok = (t == 0) ? fcntl(number, F_SETFL, O_NONBLOCK) == 0 && ioctl(number, FIONBIO, &on) == 0
                           : setsockopt(number, SOL_SOCKET, SO_LINGER, &off, sizeof off) == 0 &&
                                 recv(number, &byte, 1, MSG_DONTWAIT) <= 0 && shutdown(number, SHUT_WR) <= 0;
        if (ok) calls_on_a_socket.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (int i = 0; (i < 250000 || calls_on_a_socket.load() < kCalls) && std::chrono::steady_clock::now() < until; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_EQ(fd, number);
    close(fd);
  }
  done = true;
  for (auto& caller : callers) caller.join();
  EXPECT_GE(calls_on_a_socket.load(), kCalls);
  EXPECT_EQ(fd_table().find(number), nullptr);
}

}  // namespace
}  // namespace tcp2rdma::preload
