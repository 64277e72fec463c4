// The application's side of an upgrade, on the host: no RDMA. The wrappers are linked into this
// program, so its own read(), send(), poll() … go through them as an application's would. A session
// is started by hand on a loopback TCP connection and driven through its phases as the switch thread
// would drive it (finish() without a stream: the connection then stays TCP), so that what is checked
// is the gate: the counts of bytes moved on TCP, calls waiting for the switch, and calls going on
// afterwards.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <fcntl.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <thread>

#include "registry/fd_table.h"
#include "registry/tracked_socket.h"
#include "registry/upgrade_session.h"
#include "test_sockets.h"

namespace tcp2rdma::preload {
namespace {

using namespace std::chrono_literals;

// The module keeps its own descriptors (a session's wake fd among them) above the application's
// RLIMIT_NOFILE (own_descriptors.h). A host whose soft limit equals its hard one, and which may not
// raise the hard one, leaves no room there: this program runs with a soft limit below its hard one.
[[gnu::constructor]] void leave_room_above_the_limit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur == r.rlim_max && r.rlim_max > 2048) {
    r.rlim_cur = r.rlim_max - 1024;
    setrlimit(RLIMIT_NOFILE, &r);
  }
}

bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1;
}

// A loopback TCP connection made through the wrappers (no rule file: it stays TCP), and a session
// started by hand on its client end.
class UpgradeSessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(test::loopback_connection(&client_, &peer_));
    ASSERT_NE(fd_table().find(client_), nullptr);
    session_ = fd_table().find(client_)->start_session();
    ASSERT_NE(session_, nullptr);
  }
  void TearDown() override {
    if (session_->phase() == UpgradeSession::Phase::kSwitching) session_->finish();
    close(client_);
    close(peer_);
  }

  int client_ = -1, peer_ = -1;
  UpgradeSession* session_ = nullptr;
};

TEST(UpgradeSession, PhasesAndTheWakeFd) {
  UpgradeSession s;
  EXPECT_EQ(s.phase(), UpgradeSession::Phase::kOnTcp);
  EXPECT_FALSE(readable(s.wake_fd()));
  uint64_t sent = 1, received = 1;
  bool ended = true;
  ASSERT_TRUE(s.freeze(&sent, &received, &ended));
  EXPECT_EQ(sent, 0u);
  EXPECT_EQ(received, 0u);
  EXPECT_FALSE(ended);
  EXPECT_EQ(s.phase(), UpgradeSession::Phase::kSwitching);
  EXPECT_TRUE(readable(s.wake_fd()));  // and stays so: pollers look again
  EXPECT_TRUE(readable(s.wake_fd()));
  bool ran = false;
  EXPECT_FALSE(s.run_on_tcp([&](uint64_t&, uint64_t&) { ran = true; }));
  EXPECT_FALSE(ran);
  s.finish();
  EXPECT_EQ(s.phase(), UpgradeSession::Phase::kOver);
}

// The module's descriptors lie above the application's limit, wherever that is: counted from /proc.
size_t open_descriptors() {
  auto entries = std::filesystem::directory_iterator("/proc/self/fd");
  return static_cast<size_t>(std::distance(std::filesystem::begin(entries), std::filesystem::end(entries)));
}

// An epoll loop never sleeps on a session (its registrations move with the upgrade): such a session
// costs no descriptor. One asked for after the phase left kOnTcp is readable at once.
TEST(UpgradeSession, TheWakeFdIsMadeOnlyWhenAskedFor) {
  size_t before = open_descriptors();
  uint64_t sent = 0, received = 0;
  bool ended = false;
  {
    UpgradeSession s;
    ASSERT_TRUE(s.freeze(&sent, &received, &ended));
    EXPECT_EQ(open_descriptors(), before);
    s.finish();
  }
  UpgradeSession s;
  ASSERT_TRUE(s.freeze(&sent, &received, &ended));
  int fd = s.wake_fd();
  ASSERT_GE(fd, 0);
  EXPECT_EQ(open_descriptors(), before + 1);
  EXPECT_TRUE(readable(fd));
  EXPECT_EQ(s.wake_fd(), fd);  // made once
  s.finish();
}

TEST(UpgradeSession, SettledBeforeTheFreezeStaysTcp) {
  UpgradeSession s;
  EXPECT_TRUE(s.settle());
  EXPECT_EQ(s.phase(), UpgradeSession::Phase::kOver);
  EXPECT_TRUE(readable(s.wake_fd()));
  uint64_t sent = 0, received = 0;
  bool ended = false;
  EXPECT_FALSE(s.freeze(&sent, &received, &ended));  // the switch must write nothing
  EXPECT_FALSE(s.end_on_tcp());              // and log nothing: the settler did
  EXPECT_FALSE(s.settle());
}

TEST(UpgradeSession, SettleWaitsForASwitchUnderWay) {
  UpgradeSession s;
  uint64_t sent = 0, received = 0;
  bool ended = false;
  ASSERT_TRUE(s.freeze(&sent, &received, &ended));
  std::atomic<bool> settled{false};
  std::thread closer([&] {
    EXPECT_FALSE(s.settle());
    settled = true;
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(settled);
  s.finish();
  closer.join();
  EXPECT_TRUE(settled);
}

TEST_F(UpgradeSessionTest, CountsEveryByteMovedOnTcpButNotPeeks) {
  char buf[4096];
  std::memset(buf, 'x', sizeof buf);
  ASSERT_EQ(write(client_, buf, 1000), 1000);
  iovec iov[2] = {{buf, 300}, {buf + 300, 200}};
  ASSERT_EQ(writev(client_, iov, 2), 500);
  ASSERT_EQ(send(client_, buf, 24, 0), 24);
  ASSERT_EQ(recv(peer_, buf, 1524, MSG_WAITALL), 1524);
  ASSERT_EQ(send(peer_, buf, 700, 0), 700);
  ASSERT_EQ(recv(client_, buf, 100, MSG_PEEK | MSG_WAITALL), 100);
  ASSERT_EQ(recv(client_, buf, 600, MSG_WAITALL), 600);
  ASSERT_EQ(read(client_, buf, sizeof buf), 100);
  EXPECT_EQ(session_->sent(), 1524u);
  EXPECT_EQ(session_->received(), 700u);
}

TEST_F(UpgradeSessionTest, ANonBlockingCallSaysEagainAsTheKernelDoes) {
  char buf[16];
  errno = 0;
  EXPECT_EQ(recv(client_, buf, sizeof buf, MSG_DONTWAIT), -1);
  EXPECT_EQ(errno, EAGAIN);
  EXPECT_EQ(session_->received(), 0u);
}

TEST_F(UpgradeSessionTest, WaitAllAssemblesPiecesThatArriveApart) {
  std::thread writer([&] {
    char part[60];
    std::memset(part, 'a', sizeof part);
    ASSERT_EQ(send(peer_, part, 40, 0), 40);
    std::this_thread::sleep_for(50ms);
    ASSERT_EQ(send(peer_, part, 60, 0), 60);
  });
  char buf[100];
  EXPECT_EQ(recv(client_, buf, sizeof buf, MSG_WAITALL), 100);
  writer.join();
  EXPECT_EQ(session_->received(), 100u);
}

TEST_F(UpgradeSessionTest, ABlockedReadWaitsThroughTheSwitchAndGoesOnWhereTheConnectionIs) {
  // The reader sleeps in the gate's poll with no byte on TCP; the switch freezes the counts (the
  // reader must wake and wait for it to end), the peer's bytes come meanwhile, and the switch ends
  // without a stream: the read goes on on TCP and returns them, and nothing more is counted.
  std::atomic<ssize_t> got{-2};
  char buf[64];
  std::thread reader([&] { got = read(client_, buf, sizeof buf); });
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(got, -2);
  uint64_t sent = 0, received = 0;
  bool ended = false;
  ASSERT_TRUE(session_->freeze(&sent, &received, &ended));
  ASSERT_EQ(send(peer_, "0123456789", 10, 0), 10);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(got, -2);  // the connection is switching: the read waits
  session_->finish();
  reader.join();
  EXPECT_EQ(got, 10);
  EXPECT_EQ(std::memcmp(buf, "0123456789", 10), 0);
  EXPECT_EQ(session_->received(), 0u);
}

// A signal handler that runs while a read sleeps in the gate: without SA_RESTART the read fails with
// EINTR, as the kernel's recv does; with SA_RESTART (and no other handler lacking it) it goes on.
void install_usr1(int flags) {
  struct sigaction action {};
  action.sa_handler = [](int) {};
  action.sa_flags = flags;
  sigaction(SIGUSR1, &action, nullptr);
}

TEST_F(UpgradeSessionTest, ASignalWithoutRestartInterruptsABlockedRead) {
  install_usr1(0);
  std::atomic<ssize_t> got{-2};
  std::atomic<int> error{0};
  std::thread reader([&] {
    char buf[16];
    got = recv(client_, buf, sizeof buf, 0);
    error = errno;
  });
  std::this_thread::sleep_for(50ms);
  pthread_kill(reader.native_handle(), SIGUSR1);
  reader.join();
  EXPECT_EQ(got, -1);
  EXPECT_EQ(error, EINTR);
  signal(SIGUSR1, SIG_DFL);
}

TEST_F(UpgradeSessionTest, ASignalWithRestartLetsABlockedReadGoOn) {
  install_usr1(SA_RESTART);
  std::atomic<ssize_t> got{-2};
  char buf[16];
  std::thread reader([&] { got = recv(client_, buf, sizeof buf, 0); });
  std::this_thread::sleep_for(50ms);
  pthread_kill(reader.native_handle(), SIGUSR1);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(got, -2);  // still reading
  ASSERT_EQ(send(peer_, "late", 4, 0), 4);
  reader.join();
  EXPECT_EQ(got, 4);
  signal(SIGUSR1, SIG_DFL);
}

TEST_F(UpgradeSessionTest, PollWatchesTheSocketAndWakesWhenTheConnectionMoves) {
  std::atomic<int> rc{-2};
  pollfd p{client_, POLLIN, 0};
  std::thread poller([&] { rc = poll(&p, 1, 5000); });
  std::this_thread::sleep_for(50ms);
  uint64_t sent = 0, received = 0;
  bool ended = false;
  ASSERT_TRUE(session_->freeze(&sent, &received, &ended));
  ASSERT_EQ(send(peer_, "x", 1, 0), 1);
  session_->finish();  // stays TCP: poll looks at the socket again and finds the byte
  poller.join();
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(p.revents & POLLIN);
}

TEST_F(UpgradeSessionTest, ASuccessfulCallLeavesErrnoAlone) {
  // The kernel's recv() and send() do not touch errno when they succeed, and programs read it anyway
  // (sockperf takes a stale ECONNRESET after a successful recvfrom() for the peer's end). A blocking
  // read that first found nothing (EAGAIN inside) and a write must leave it as it was.
  std::thread writer([&] {
    std::this_thread::sleep_for(50ms);
    ASSERT_EQ(send(peer_, "abc", 3, 0), 3);
  });
  char buf[3];
  errno = ECONNRESET;
  EXPECT_EQ(read(client_, buf, sizeof buf), 3);
  EXPECT_EQ(errno, ECONNRESET);
  writer.join();
  errno = EPIPE;
  EXPECT_EQ(send(client_, "x", 1, 0), 1);
  EXPECT_EQ(errno, EPIPE);
}

TEST_F(UpgradeSessionTest, CloseSettlesASessionStillOnTcp) {
  UpgradeSession* session = session_;
  int dup_fd = dup(client_);
  ASSERT_GE(dup_fd, 0);
  ASSERT_EQ(close(dup_fd), 0);  // any descriptor of the socket: the connection stays TCP
  EXPECT_EQ(session->phase(), UpgradeSession::Phase::kOver);
  char buf[4];
  ASSERT_EQ(send(peer_, "abcd", 4, 0), 4);
  EXPECT_EQ(recv(client_, buf, 4, MSG_WAITALL), 4);  // straight to the kernel now
  EXPECT_EQ(session->received(), 0u);
}

}  // namespace
}  // namespace tcp2rdma::preload

namespace tcp2rdma::preload {
namespace {

// sendfile without an offset to a connection the module carries (here: on TCP in its upgrade, a
// non-blocking socket whose send buffer is full): the file's position moves by what was sent, never
// by what was read and then could not go (the bytes were lost: the caller's retry started after them).
TEST_F(UpgradeSessionTest, SendfileConsumesOnlyWhatItSent) {
  char path[] = "/tmp/t2r-sendfile-XXXXXX";
  int file = mkstemp(path);
  ASSERT_GE(file, 0);
  unlink(path);
  std::vector<char> data(1 << 20, 'x');
  ASSERT_EQ(write(file, data.data(), data.size()), static_cast<ssize_t>(data.size()));
  ASSERT_EQ(lseek(file, 0, SEEK_SET), 0);
  ASSERT_EQ(fcntl(client_, F_SETFL, O_NONBLOCK), 0);
  int small = 16384;
  setsockopt(client_, SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
  setsockopt(peer_, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  size_t moved = 0;
  for (int i = 0; i < 1000; ++i) {  // until the socket takes nothing more
    ssize_t n = sendfile(client_, file, nullptr, 65536);
    if (n < 0) {
      EXPECT_EQ(errno, EAGAIN);
      break;
    }
    moved += static_cast<size_t>(n);
  }
  EXPECT_GT(moved, 0u);
  EXPECT_LT(moved, data.size());
  EXPECT_EQ(lseek(file, 0, SEEK_CUR), static_cast<off_t>(moved));
  close(file);
}

}  // namespace
}  // namespace tcp2rdma::preload
