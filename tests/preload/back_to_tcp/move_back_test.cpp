// A connection back on TCP with a prefix (move_back.h), on loopback TCP on the host: the prefix is
// what the peer had sent on the stream and this side had not read; every way of reading and of asking
// for readiness must give it before the kernel's bytes, a forked child must share it with its parent,
// and exec's hand-on must restore it. The
// wrappers are linked into this program, so its calls go through them as an application's would.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "libc/real_calls.h"
#include "process/exec_guard.h"
#include "registry/connection_path.h"
#include "registry/fd_table.h"
#include "registry/socket_registry.h"
#include "registry/tcp_prefix.h"
#include "registry/tracked_socket.h"
#include "registry/upgrade_session.h"
#include "test_sockets.h"

namespace tcp2rdma::preload {
namespace {

class MoveBack : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(test::loopback_connection(&ours_, &peer_));
    ASSERT_NE(fd_table().find(ours_), nullptr);
  }
  void TearDown() override {
    close(ours_);
    close(peer_);
  }
  void set_prefix(const std::string& bytes, bool then_end) {
    fd_table().find(ours_)->prefix.set(std::vector<uint8_t>(bytes.begin(), bytes.end()), then_end);
  }
  std::string receive(size_t n, int flags) {
    std::string buf(n, '\0');
    ssize_t got = recv(ours_, buf.data(), n, flags);
    buf.resize(got > 0 ? static_cast<size_t>(got) : 0);
    return buf;
  }
  int ours_ = -1;
  int peer_ = -1;
};

TEST_F(MoveBack, ThePrefixComesBeforeTheKernelsBytesForEveryKindOfRead) {
  set_prefix("abc", false);
  ASSERT_EQ(write(peer_, "def", 3), 3);
  usleep(20000);
  int queued = 0;
  ASSERT_EQ(ioctl(ours_, FIONREAD, &queued), 0);
  EXPECT_EQ(queued, 6);
  EXPECT_EQ(receive(10, MSG_PEEK), "abc");  // a read returns what the prefix holds, at most
  EXPECT_EQ(receive(2, 0), "ab");
  EXPECT_EQ(receive(4, MSG_WAITALL), "cdef");  // the prefix's rest, then the kernel's
  EXPECT_FALSE(fd_table().find(ours_)->prefix.present());
  EXPECT_EQ(receive(10, MSG_DONTWAIT), "");
  EXPECT_EQ(errno, EAGAIN);
}

// A return to RDMA starts only while no kernel call is under way on the connection (return_to_rdma.h:
// a read inside the kernel would take the switch's bytes for the peer's, a write going on in the
// kernel's send would put bytes after the frozen count, where the switch's record must be). A read that
// began on the prefix and goes on in the kernel for the rest is such a call.
TEST_F(MoveBack, AReadThatGoesOnInTheKernelAfterThePrefixIsCountedWhileAReturnIsPlanned) {
  TrackedSocket* socket = fd_table().find(ours_);
  set_prefix("abc", false);
  ASSERT_TRUE(socket->move_path(Path::kTcp, Path::kBackOnTcp));
  socket->returns.arm(std::chrono::steady_clock::now());  // due in a second: none starts here
  std::string got;
  std::thread reader([&] { got = receive(6, MSG_WAITALL); });
  for (int i = 0; i < 2000 && socket->prefix.present(); ++i) usleep(1000);
  usleep(50000);  // the reader is in the kernel's recv for "def"
  EXPECT_EQ(socket->tcp_calls(), 1);
  ASSERT_EQ(write(peer_, "def", 3), 3);
  reader.join();
  EXPECT_EQ(got, "abcdef");
  EXPECT_EQ(socket->tcp_calls(), 0);
}

// A write while the prefix is there goes to the kernel at once, and may wait in its send for as long
// as the peer does not read: counted too, for the whole wait.
TEST_F(MoveBack, AWriteThatWaitsInTheKernelBesideAPrefixIsCountedWhileAReturnIsPlanned) {
  TrackedSocket* socket = fd_table().find(ours_);
  set_prefix("abc", false);
  ASSERT_TRUE(socket->move_path(Path::kTcp, Path::kBackOnTcp));
  socket->returns.arm(std::chrono::steady_clock::now());
  const std::string big(8 << 20, 'w');  // more than loopback's buffers take while the peer reads nothing
  ssize_t sent = 0;
  std::thread writer([&] { sent = send(ours_, big.data(), big.size(), 0); });
  usleep(100000);
  EXPECT_EQ(socket->tcp_calls(), 1);
  std::string drained(1 << 20, '\0');
  size_t total = 0;
  while (total < big.size()) {
    ssize_t n = read(peer_, drained.data(), drained.size());
    ASSERT_GT(n, 0);
    total += static_cast<size_t>(n);
  }
  writer.join();
  EXPECT_EQ(sent, static_cast<ssize_t>(big.size()));
  EXPECT_EQ(socket->tcp_calls(), 0);
}

// A shutdown on a connection back on TCP starts no return, even one that is due: the return's switch
// would come to write its record on TCP after the end the shutdown sends, and reset the connection
// (the peer reads that end where the record should be). The next call finds TCP ended and gives up.
TEST_F(MoveBack, AShutdownStartsNoReturnThatIsDue) {
  TrackedSocket* socket = fd_table().find(ours_);
  UpgradeSession* first = socket->start_session();  // the upgrade that once carried it to RDMA
  ASSERT_NE(first, nullptr);
  ASSERT_TRUE(first->end_on_tcp());
  ASSERT_TRUE(socket->move_path(Path::kTcp, Path::kBackOnTcp));
  config::Rule rule;
  rule.name = "returns";
  socket->returns.remember(config::Decision{&rule, &rule.options});
  socket->returns.arm(std::chrono::steady_clock::now() - std::chrono::seconds(10));  // due long ago
  ASSERT_EQ(shutdown(ours_, SHUT_WR), 0);
  EXPECT_EQ(socket->session(), first);  // no return session followed it
  char byte = 0;
  EXPECT_EQ(recv(peer_, &byte, 1, 0), 0);  // the peer reads the end
}

TEST_F(MoveBack, PollAndEpollReportThePrefixThatTheKernelCannotSee) {
  set_prefix("xyz", false);
  pollfd p{ours_, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 0), 1);
  EXPECT_TRUE(p.revents & POLLIN);
  int ep = epoll_create1(0);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 42;
  ASSERT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, ours_, &ev), 0);
  epoll_event got[4];
  ASSERT_EQ(epoll_wait(ep, got, 4, 0), 1);
  EXPECT_EQ(got[0].data.u64, 42u);
  EXPECT_TRUE(got[0].events & EPOLLIN);
  ASSERT_EQ(epoll_wait(ep, got, 4, 0), 1);  // level-triggered: while the prefix lasts
  EXPECT_EQ(receive(10, 0), "xyz");
  EXPECT_EQ(epoll_wait(ep, got, 4, 0), 0);  // the kernel's socket is empty
  p.revents = 0;
  EXPECT_EQ(poll(&p, 1, 0), 0);
  // From now on it is the kernel's, registration and all.
  ASSERT_EQ(write(peer_, "k", 1), 1);
  ASSERT_EQ(epoll_wait(ep, got, 4, 1000), 1);
  EXPECT_EQ(got[0].data.u64, 42u);
  close(ep);
}

TEST_F(MoveBack, AnEdgeTriggeredRegistrationIsToldOnceAndNotTwiceForOneWakeup) {
  set_prefix("p", false);
  ASSERT_EQ(write(peer_, "q", 1), 1);
  usleep(20000);
  int ep = epoll_create1(0);
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLET;
  ev.data.u64 = 7;
  ASSERT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, ours_, &ev), 0);
  epoll_event got[4];
  ASSERT_EQ(epoll_wait(ep, got, 4, 0), 1);  // the prefix and the kernel's byte: one entry
  EXPECT_EQ(got[0].data.u64, 7u);
  EXPECT_EQ(epoll_wait(ep, got, 4, 0), 0);
  EXPECT_EQ(receive(10, MSG_WAITALL | MSG_DONTWAIT), "pq");
  close(ep);
}

TEST_F(MoveBack, AnEndAfterThePrefixIsAnEndWhateverTheKernelHolds) {
  set_prefix("last", true);
  EXPECT_EQ(receive(10, 0), "last");
  EXPECT_EQ(recv(ours_, nullptr, 0, MSG_DONTWAIT), 0);
  char c;
  EXPECT_EQ(read(ours_, &c, 1), 0);
  EXPECT_EQ(read(ours_, &c, 1), 0);  // repeatably
  pollfd p{ours_, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 0), 1);
}

TEST_F(MoveBack, AForkedChildAndItsParentShareThePrefixAsTheyShareTheSocket) {
  set_prefix("0123456789", false);
  pid_t child = fork();
  if (child == 0) {
    char buf[4];
    _exit(recv(ours_, buf, 4, 0) == 4 && std::string(buf, 4) == "0123" ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  // Each byte went to one reader, as the kernel gives each byte of a socket's queue to one.
  EXPECT_EQ(receive(10, 0), "456789");
}

TEST_F(MoveBack, AQueueMadeToBeSharedIsOneQueueInEveryProcessThatMapsIt) {
  // A parent's move back for its child's claim: the parent keeps the bytes too, and the child maps
  // the same queue from the memfd the answer carries. Each byte goes to one reader; a child that
  // reads none leaves them all to the parent (it wrote once and exited).
  TcpPrefix parents;
  ASSERT_TRUE(parents.set_shared({'a', 'b', 'c', 'd', 'e', 'f'}, false));
  std::shared_ptr<const int> memfd = parents.shareable();
  ASSERT_NE(memfd, nullptr);
  EXPECT_GE(*memfd, 3);
  pid_t child = fork();
  if (child == 0) {
    TcpPrefix childs;
    char buf[2];
    iovec iov{buf, sizeof buf};
    bool at_end = false;
    _exit(childs.adopt(memfd) && childs.size() == 6 && childs.take(&iov, 1, false, &at_end) == 2 &&
                  std::string(buf, 2) == "ab"
              ? 0
              : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  char buf[8];
  iovec iov{buf, sizeof buf};
  bool at_end = false;
  ASSERT_EQ(parents.take(&iov, 1, false, &at_end), 4u);
  EXPECT_EQ(std::string(buf, 4), "cdef");
  TcpPrefix other;
  EXPECT_FALSE(other.adopt(nullptr));
}

TEST_F(MoveBack, APrefixReadToItsEndGivesWayToTheNextMoveBacks) {
  // Back on RDMA after a first move, moved back again (a fork's child claims it): a new prefix, and
  // a new shared queue, where one with bytes left would be refused.
  TcpPrefix prefix;
  ASSERT_TRUE(prefix.set({'x', 'y'}, false));
  EXPECT_FALSE(prefix.set_shared({'z'}, false));  // two bytes not read yet
  char buf[4];
  iovec iov{buf, sizeof buf};
  bool at_end = false;
  ASSERT_EQ(prefix.take(&iov, 1, false, &at_end), 2u);
  ASSERT_TRUE(prefix.set_shared({'1', '2', '3'}, false));
  ASSERT_NE(prefix.shareable(), nullptr);
  ASSERT_EQ(prefix.take(&iov, 1, false, &at_end), 3u);
  EXPECT_EQ(std::string(buf, 3), "123");
  ASSERT_TRUE(prefix.set({'4'}, false));
  EXPECT_EQ(prefix.shareable(), nullptr);  // the earlier shared queue is not this one
  EXPECT_EQ(prefix.size(), 1u);
}

TEST_F(MoveBack, ExecsHandOnIsAdoptedOncePerSocketForEveryDescriptor) {
  int mfd = static_cast<int>(memfd_create("prefix", 0));
  ASSERT_EQ(write(mfd, "handed", 6), 6);
  int copy = dup(ours_);
  // As the new program finds it: descriptors it inherited, which its module has never seen.
  track_close(ours_);
  track_close(copy);
  std::string value = std::to_string(ours_) + ":" + std::to_string(mfd) + ":0," + std::to_string(copy) + ":" +
                      std::to_string(mfd) + ":0";
  setenv(kExecPrefixVariable, value.c_str(), 1);
  adopt_exec_prefixes();
  EXPECT_EQ(std::getenv(kExecPrefixVariable), nullptr);  // a later exec starts afresh
  EXPECT_EQ(fcntl(mfd, F_GETFD), -1);                    // read and closed
  ASSERT_NE(fd_table().find(ours_), nullptr);
  EXPECT_EQ(fd_table().find(copy), fd_table().find(ours_));  // dup'd: one socket, one prefix
  ASSERT_EQ(write(peer_, "!", 1), 1);
  std::string buf(7, '\0');
  ASSERT_EQ(recv(copy, buf.data(), 3, 0), 3);
  ASSERT_EQ(recv(ours_, buf.data() + 3, 4, MSG_WAITALL), 4);
  EXPECT_EQ(buf, "handed!");
  close(copy);
}

// TCP_CORK on a connection on RDMA is kept, not told to the kernel socket (which carries no byte
// meanwhile: two system calls a request saved for nginx's tcp_nopush); getsockopt reads it back as
// set, and the kernel socket has it once the connection is back on TCP.
TEST_F(MoveBack, ACorkSetOnRdmaReachesTheKernelSocketWhenTheConnectionIsBackOnTcp) {
  TrackedSocket* socket = fd_table().find(ours_);
  ASSERT_TRUE(socket->move_path(Path::kTcp, Path::kRdma));
  int on = 1, value = -1;
  socklen_t len = sizeof value;
  ASSERT_EQ(setsockopt(ours_, IPPROTO_TCP, TCP_CORK, &on, sizeof on), 0);
  ASSERT_EQ(getsockopt(ours_, IPPROTO_TCP, TCP_CORK, &value, &len), 0);
  EXPECT_EQ(value, 1);
  EXPECT_EQ(len, sizeof value);
  ASSERT_EQ(real().getsockopt(ours_, IPPROTO_TCP, TCP_CORK, &value, &len), 0);
  EXPECT_EQ(value, 0);  // the kernel was not told
  ASSERT_TRUE(mark_connection_back_on_tcp(socket, ours_));
  ASSERT_EQ(real().getsockopt(ours_, IPPROTO_TCP, TCP_CORK, &value, &len), 0);
  EXPECT_EQ(value, 1);
  // On TCP the kernel's own call again.
  int off = 0;
  ASSERT_EQ(setsockopt(ours_, IPPROTO_TCP, TCP_CORK, &off, sizeof off), 0);
  ASSERT_EQ(real().getsockopt(ours_, IPPROTO_TCP, TCP_CORK, &value, &len), 0);
  EXPECT_EQ(value, 0);
  // A short value is the kernel's to refuse, on RDMA too.
  ASSERT_TRUE(socket->move_path(Path::kBackOnTcp, Path::kRdma));
  EXPECT_EQ(setsockopt(ours_, IPPROTO_TCP, TCP_CORK, &on, 2), -1);
  EXPECT_EQ(errno, EINVAL);
}

}  // namespace
}  // namespace tcp2rdma::preload
