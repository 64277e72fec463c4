// The wrappers are linked into this program, so its own socket(), dup(), close() … go through them,
// exactly as an application's would under LD_PRELOAD; the fd table must mirror the kernel's.
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <sys/eventfd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "libc/interposed.h"
#include "libc/kept_descriptors.h"
#include "registry/connection_path.h"
#include "registry/fd_table.h"
#include "registry/tracked_socket.h"
#include "test_sockets.h"

namespace tcp2rdma::preload {
namespace {

TrackedSocket* tracked(int fd) { return fd_table().find(fd); }

TEST(Registry, TcpSocketsAreTrackedOthersAreNot) {
  int tcp4 = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int tcp6 = socket(AF_INET6, SOCK_STREAM, IPPROTO_TCP);
  int udp = socket(AF_INET, SOCK_DGRAM, 0);
  int unix_stream = socket(AF_UNIX, SOCK_STREAM, 0);
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  ASSERT_NE(tracked(tcp4), nullptr);
  EXPECT_EQ(tracked(tcp4)->domain(), AF_INET);
  ASSERT_NE(tracked(tcp6), nullptr);
  EXPECT_EQ(tracked(tcp6)->domain(), AF_INET6);
  EXPECT_EQ(tracked(udp), nullptr);
  EXPECT_EQ(tracked(unix_stream), nullptr);
  EXPECT_EQ(tracked(pipe_fds[0]), nullptr);
  for (int fd : {tcp4, tcp6, udp, unix_stream, pipe_fds[0], pipe_fds[1]}) EXPECT_EQ(close(fd), 0);
  EXPECT_EQ(tracked(tcp4), nullptr);
  EXPECT_EQ(tracked(tcp6), nullptr);
}

TEST(Registry, DupVariantsShareOneSocketUntilTheLastClose) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  TrackedSocket* shared = tracked(fd);
  ASSERT_NE(shared, nullptr);
  int a = dup(fd);
  int b = fcntl(fd, F_DUPFD_CLOEXEC, 100);
  int c = dup2(fd, 200);
  int d = dup3(fd, 201, O_CLOEXEC);
  ASSERT_GE(b, 100);
  ASSERT_EQ(c, 200);
  ASSERT_EQ(d, 201);
  for (int dupe : {a, b, c, d}) EXPECT_EQ(tracked(dupe), shared);
  EXPECT_EQ(close(fd), 0);
  EXPECT_EQ(tracked(fd), nullptr);
  EXPECT_EQ(tracked(a), shared);  // still alive: other descriptors refer to it
  for (int dupe : {a, b, c, d}) EXPECT_EQ(close(dupe), 0);
  for (int dupe : {a, b, c, d}) EXPECT_EQ(tracked(dupe), nullptr);
}

TEST(Registry, Dup2OverATrackedSocketReplacesIt) {
  int tcp = socket(AF_INET, SOCK_STREAM, 0);
  int other = socket(AF_INET6, SOCK_STREAM, 0);
  int udp = socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_EQ(dup2(other, tcp), tcp);
  EXPECT_EQ(tracked(tcp), tracked(other));
  ASSERT_EQ(dup2(udp, tcp), tcp);  // the kernel closed the TCP socket's descriptor and reused it
  EXPECT_EQ(tracked(tcp), nullptr);
  EXPECT_NE(tracked(other), nullptr);
  for (int fd : {tcp, other, udp}) EXPECT_EQ(close(fd), 0);
}

TEST(Registry, DupOntoItselfChangesNothing) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  TrackedSocket* before = tracked(fd);
  EXPECT_EQ(dup2(fd, fd), fd);
  EXPECT_EQ(tracked(fd), before);
  EXPECT_EQ(close(fd), 0);
}

TEST(Registry, FailedCallsLeaveTheTableAndErrnoAlone) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  TrackedSocket* before = tracked(fd);
  errno = 0;
  EXPECT_EQ(dup2(fd, -5), -1);
  EXPECT_EQ(errno, EBADF);
  EXPECT_EQ(close(987654), -1);
  EXPECT_EQ(errno, EBADF);
  EXPECT_EQ(tracked(fd), before);
  EXPECT_EQ(socket(12345, SOCK_STREAM, 0), -1);
  EXPECT_EQ(errno, EAFNOSUPPORT);
  EXPECT_EQ(close(fd), 0);
}

TEST(Registry, CloseRangeForgetsOnlyWhatItClosed) {
  int low = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(dup2(low, 300), 300);
  ASSERT_EQ(dup2(low, 301), 301);
  ASSERT_EQ(dup2(low, 310), 310);
  ASSERT_EQ(close_range(300, 301, CLOSE_RANGE_CLOEXEC), 0);  // only marks them: still open
  EXPECT_NE(tracked(300), nullptr);
  ASSERT_EQ(close_range(300, 305, 0), 0);
  EXPECT_EQ(tracked(300), nullptr);
  EXPECT_EQ(tracked(301), nullptr);
  EXPECT_NE(tracked(310), nullptr);
  EXPECT_NE(tracked(low), nullptr);
  EXPECT_EQ(close(310), 0);
  EXPECT_EQ(close(low), 0);
}

// A server's child that closes every descriptor above 2 before it execs its service (openbsd-inetd:
// close_range(3, ~0U, 0)) leaves the module's kept ones (its channel to the parent, the log) open;
// close() of one says it is not open; closefrom() the same; once the module lets go, they close.
TEST(Registry, CloseRangeCloseAndClosefromLeaveTheModulesKeptDescriptors) {
  int made = eventfd(0, EFD_CLOEXEC);
  ASSERT_GE(made, 0);
  ASSERT_EQ(dup2(made, 400), 400);  // the application's
  ASSERT_EQ(dup2(made, 410), 410);  // the module's
  ASSERT_EQ(dup2(made, 420), 420);  // the application's
  ASSERT_EQ(close(made), 0);
  keep_from_application(410);
  EXPECT_TRUE(kept_from_application(410));
  EXPECT_FALSE(kept_from_application(400));
  ASSERT_EQ(close_range(400, 430, 0), 0);
  EXPECT_EQ(fcntl(400, F_GETFD), -1);
  EXPECT_EQ(fcntl(420, F_GETFD), -1);
  EXPECT_GE(fcntl(410, F_GETFD), 0);
  errno = 0;
  EXPECT_EQ(close(410), -1);
  EXPECT_EQ(errno, EBADF);
  EXPECT_GE(fcntl(410, F_GETFD), 0);
  ASSERT_EQ(dup2(410, 415), 415);
  closefrom(405);
  EXPECT_EQ(fcntl(415, F_GETFD), -1);
  EXPECT_GE(fcntl(410, F_GETFD), 0);
  ASSERT_EQ(close_range(410, 410, 0), 0);  // the range is only the kept one
  EXPECT_GE(fcntl(410, F_GETFD), 0);
  release_to_application(410);
  EXPECT_FALSE(kept_from_application(410));
  EXPECT_EQ(close(410), 0);
}

TEST(Registry, RolesFollowListenConnectAndAccept) {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  ASSERT_TRUE(test::bind_loopback(listener, &addr));
  EXPECT_EQ(tracked(listener)->role(), SocketRole::kUnknown);
  ASSERT_EQ(listen(listener, 4), 0);
  EXPECT_EQ(tracked(listener)->role(), SocketRole::kListener);

  int client = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  int rc = connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  ASSERT_TRUE(rc == 0 || errno == EINPROGRESS);
  EXPECT_EQ(tracked(client)->role(), SocketRole::kClient);
  int server = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  ASSERT_GE(server, 0);
  ASSERT_NE(tracked(server), nullptr);
  EXPECT_EQ(tracked(server)->role(), SocketRole::kServer);
  for (int fd : {listener, client, server}) EXPECT_EQ(close(fd), 0);
}

TEST(Registry, AChildInheritsTheTableWithItsDescriptors) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) _exit(tracked(fd) != nullptr && tracked(fd)->domain() == AF_INET ? 0 : 1);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(close(fd), 0);
}

// The connection's path is one named state, changed only along the documented transitions, and by
// exactly one caller when several race (here: readers that all see the peer's move back to TCP).
TEST(ConnectionPath, ChangesOnlyAlongItsTransitionsAndOnceUnderRaces) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  TrackedSocket* t = tracked(fd);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->path(), Path::kTcp);
  EXPECT_FALSE(t->move_path(Path::kTcp, Path::kFailingOver));  // not a transition
  EXPECT_FALSE(t->move_path(Path::kRdma, Path::kBackOnTcp)); // not where it is
  EXPECT_EQ(t->path(), Path::kTcp);

  ASSERT_TRUE(t->move_path(Path::kTcp, Path::kUpgradePending));
  EXPECT_TRUE(t->upgrade_pending());
  EXPECT_TRUE(t->move_path(Path::kUpgradePending, Path::kTcp));   // one call takes it up
  EXPECT_FALSE(t->move_path(Path::kUpgradePending, Path::kTcp));  // the next finds it taken
  EXPECT_EQ(t->path(), Path::kTcp);

  ASSERT_TRUE(t->move_path(Path::kTcp, Path::kRdma));
  ASSERT_TRUE(t->move_path(Path::kRdma, Path::kMovingBack));
  EXPECT_TRUE(t->moving_back());
  // While this thread moves it, a reader that sees the peer's move does nothing.
  EXPECT_FALSE(mark_connection_back_on_tcp(t, fd));
  ASSERT_TRUE(t->move_path(Path::kMovingBack, Path::kRdma));  // the move failed: it stays on RDMA

  std::atomic<int> winners{0};
  std::vector<std::thread> readers;
  for (int i = 0; i < 8; ++i) {
    readers.emplace_back([&] {
      if (mark_connection_back_on_tcp(t, fd)) ++winners;
    });
  }
  for (auto& r : readers) r.join();
  EXPECT_EQ(winners.load(), 1);
  EXPECT_TRUE(t->back_on_tcp());
  EXPECT_EQ(t->stream(), nullptr);
  // Back on TCP leaves only for RDMA again, with a return's new stream (set_stream).
  for (Path to : {Path::kTcp, Path::kMovingBack, Path::kUpgradePending, Path::kFailingOver}) {
    EXPECT_FALSE(t->move_path(Path::kBackOnTcp, to)) << to_string(to);
  }
  EXPECT_STREQ(to_string(t->path()), "back on tcp");
  EXPECT_EQ(close(fd), 0);
}

// A failover is claimed once (the watcher and an application's call may both find the path failed),
// ends on TCP or back on the (reset) stream, and only its mover marks it back on TCP: a reader that
// sees the stream left waits instead (being_moved).
TEST(ConnectionPath, AFailoverIsClaimedOnceAndEndedOnlyByItsMover) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  TrackedSocket* t = tracked(fd);
  ASSERT_NE(t, nullptr);
  EXPECT_FALSE(t->move_path(Path::kTcp, Path::kFailingOver));  // only a connection on RDMA fails over
  ASSERT_TRUE(t->move_path(Path::kTcp, Path::kRdma));
  std::atomic<int> claims{0};
  std::vector<std::thread> finders;
  for (int i = 0; i < 8; ++i) {
    finders.emplace_back([&] {
      if (t->move_path(Path::kRdma, Path::kFailingOver)) ++claims;
    });
  }
  for (auto& f : finders) f.join();
  EXPECT_EQ(claims.load(), 1);
  EXPECT_TRUE(t->being_moved());
  EXPECT_FALSE(t->moving_back());  // not a fork's move: move_streams_back leaves it alone
  EXPECT_FALSE(mark_connection_back_on_tcp(t, fd));  // a reader that saw the stream left
  EXPECT_FALSE(t->move_path(Path::kFailingOver, Path::kMovingBack));
  ASSERT_TRUE(t->move_path(Path::kFailingOver, Path::kRdma));  // given up: the stream's reset
  ASSERT_TRUE(t->move_path(Path::kRdma, Path::kFailingOver));
  EXPECT_TRUE(mark_connection_back_on_tcp(t, fd, /*by_mover=*/true));
  EXPECT_TRUE(t->back_on_tcp());
  EXPECT_FALSE(t->move_path(Path::kBackOnTcp, Path::kFailingOver));
  EXPECT_STREQ(to_string(Path::kFailingOver), "failing over");
  EXPECT_EQ(close(fd), 0);
}

// A shutdown(SHUT_WR) during a failover and the failover's end: exactly one of them shuts TCP's side.
TEST(ConnectionPath, AShutdownDuringAFailoverIsDoneOnceWhoeverComesSecond) {
  for (int round = 0; round < 200; ++round) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    TrackedSocket* t = tracked(fd);
    ASSERT_NE(t, nullptr);
    std::atomic<int> shutters{0};
    std::thread app([&] { shutters += t->shut_when_on_tcp(); });
    std::thread mover([&] { shutters += t->on_tcp_shut_asked(); });
    app.join();
    mover.join();
    EXPECT_EQ(shutters.load(), 1);
    EXPECT_EQ(close(fd), 0);
  }
}

}  // namespace
}  // namespace tcp2rdma::preload
