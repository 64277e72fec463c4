// A descriptor number is the kernel's to give again the moment it is closed, to anyone: the
// application, this module, librdmacm. A new descriptor must never meet the state the module kept for
// the socket that had the number before (its stream, its prefix), or its bytes go to, or come from,
// another connection. Seen once in the Soft-RoCE pair: a new rdma_cm event channel got the number of a
// socket the application was closing, and librdmacm's commands on it (56 bytes) travelled down that
// socket's stream to its peer's application. Here on the host, with a socket back on TCP whose prefix
// stands for the state (move_back.h): a prefix is served by read() before the kernel's bytes.
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "libc/real_calls.h"
#include "own_calls.h"
#include "registry/fd_table.h"
#include "registry/tracked_socket.h"
#include "test_sockets.h"

namespace tcp2rdma::preload {
namespace {

const std::string kForeign = "the old socket's bytes";

void set_prefix(int fd) {
  fd_table().find(fd)->prefix.set(std::vector<uint8_t>(kForeign.begin(), kForeign.end()), false);
}

// What the descriptor that took the closed number over read and wrote through the module's wrappers,
// from inside the real close() (as another thread would, the instant the number is free).
// An eventfd is put at exactly that number (the kernel gives the lowest free one, and this program
// may hold lower ones free).
struct Reuse {
  int closing = -1;
  int reused = -1;
  ssize_t wrote = 0;
  ssize_t read = 0;
  uint64_t value = 0;
};
Reuse g_reuse;
int (*g_original_close)(int) = nullptr;

int at_number(int number) {
  int e = eventfd(0, EFD_NONBLOCK);
  if (e < 0 || e == number) return e;
  int rc = static_cast<int>(syscall(SYS_dup3, e, number, 0));  // the kernel's dup3, not the wrapper
  real().close(e);
  return rc;
}

int close_and_reuse(int fd) {
  int rc = g_original_close(fd);
  if (fd == g_reuse.closing) {
    g_reuse.reused = at_number(fd);
    uint64_t one = 1;
    g_reuse.wrote = write(g_reuse.reused, &one, sizeof one);  // through the module's wrapper
    g_reuse.read = read(g_reuse.reused, &g_reuse.value, sizeof g_reuse.value);
  }
  return rc;
}

TEST(DescriptorReuse, ANumberGivenAgainDuringCloseIsNeverTheOldSocket) {
  int ours = -1, peer = -1;
  ASSERT_TRUE(test::loopback_connection(&ours, &peer));
  set_prefix(ours);
  auto& calls = const_cast<RealCalls&>(real());
  g_original_close = calls.close;
  calls.close = close_and_reuse;
  g_reuse.closing = ours;
  close(ours);
  calls.close = g_original_close;
  ASSERT_EQ(g_reuse.reused, ours);
  EXPECT_EQ(g_reuse.wrote, 8) << "the eventfd's write went elsewhere: " << strerror(errno);
  EXPECT_EQ(g_reuse.read, 8);
  EXPECT_EQ(g_reuse.value, 1u) << "the eventfd read another socket's bytes";
  EXPECT_EQ(fd_table().find(g_reuse.reused), nullptr);
  close(g_reuse.reused);
  close(peer);
}

TEST(DescriptorReuse, TheTransportsOwnCallsReachTheKernelWhateverTheTableSays) {
  int ours = -1, peer = -1;
  ASSERT_TRUE(test::loopback_connection(&ours, &peer));
  set_prefix(ours);
  ASSERT_EQ(write(peer, "kernel", 6), 6);
  usleep(20000);
  char buf[64] = {};
  {
    transport::OwnCalls own;
    EXPECT_EQ(fd_table().find(ours), nullptr);
    ASSERT_EQ(read(ours, buf, sizeof buf), 6);
    EXPECT_EQ(std::string(buf, 6), "kernel");
  }
  ASSERT_NE(fd_table().find(ours), nullptr);
  ASSERT_EQ(read(ours, buf, sizeof buf), static_cast<ssize_t>(kForeign.size()));  // the application's call
  EXPECT_EQ(std::string(buf, kForeign.size()), kForeign);
  close(ours);
  close(peer);
}

TEST(DescriptorReuse, CloseRangeTakesTheEntriesOutBeforeTheNumbersAreFree) {
  int ours = -1, peer = -1;
  ASSERT_TRUE(test::loopback_connection(&ours, &peer));
  set_prefix(ours);
  ASSERT_EQ(close_range(static_cast<unsigned>(ours), static_cast<unsigned>(ours), 0), 0);
  EXPECT_EQ(fd_table().find(ours), nullptr);
  int reused = at_number(ours);
  ASSERT_EQ(reused, ours);
  uint64_t value = 0;
  EXPECT_EQ(read(reused, &value, sizeof value), -1);
  EXPECT_EQ(errno, EAGAIN);
  close(reused);
  close(peer);
}

}  // namespace
}  // namespace tcp2rdma::preload
