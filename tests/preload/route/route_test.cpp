// The route lookup (route/route.h) on the host, no RDMA: each state of a connection's path gives its
// route, the lookup itself never starts or waits for anything, and the data calls' resolver
// (route_for_call) runs a pending upgrade only when the connection is up and waits out a switch.
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "data/stream_calls.h"
#include "registry/fd_table.h"
#include "registry/tracked_socket.h"
#include "registry/upgrade_session.h"
#include "route/route.h"
#include "test_sockets.h"

namespace tcp2rdma::preload {
namespace {

using Kind = StreamRef::Kind;
using namespace std::chrono_literals;

Kind kind_of(int fd) { return route_of(SocketHold::of(fd)).kind(); }

TEST(Route, NotOursAndPlainTcpGoToTheKernel) {
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  EXPECT_EQ(kind_of(pipe_fds[0]), Kind::kKernel);
  EXPECT_FALSE(route_for_call(pipe_fds[0]).ours());
  int tcp = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_NE(fd_table().find(tcp), nullptr);
  EXPECT_EQ(kind_of(tcp), Kind::kKernel);
  for (int fd : {pipe_fds[0], pipe_fds[1], tcp}) close(fd);
}

TEST(Route, ThePendingUpgradeIsFoundNotStartedAndRunsOnlyOnceTheConnectionIsUp) {
  int tcp = socket(AF_INET, SOCK_STREAM, 0);  // never connected: getpeername fails
  TrackedSocket* t = fd_table().find(tcp);
  ASSERT_NE(t, nullptr);
  ASSERT_TRUE(t->move_path(Path::kTcp, Path::kUpgradePending));
  EXPECT_EQ(kind_of(tcp), Kind::kPending);
  EXPECT_EQ(kind_of(tcp), Kind::kPending);  // looking changed nothing
  EXPECT_TRUE(t->upgrade_pending());
  StreamRef r = route_for_call(tcp);  // not connected yet: the kernel's, and still pending
  EXPECT_EQ(r.kind(), Kind::kKernel);
  EXPECT_TRUE(t->upgrade_pending());
  close(tcp);

  // Once it is up, the first call's resolver runs it (a decision for TCP here: it stays TCP).
  int client = -1, peer = -1;
  ASSERT_TRUE(test::loopback_connection(&client, &peer));
  TrackedSocket* c = fd_table().find(client);
  ASSERT_NE(c, nullptr);
  static const config::ConnectionOptions tcp_options{};
  c->pending_decision = config::Decision{nullptr, &tcp_options};
  ASSERT_TRUE(c->move_path(Path::kTcp, Path::kUpgradePending));
  EXPECT_EQ(route_for_call(client).kind(), Kind::kKernel);
  EXPECT_FALSE(c->upgrade_pending());
  EXPECT_EQ(c->path(), Path::kTcp);
  close(client);
  close(peer);
}

TEST(Route, ASessionOnTcpIsCountedAndASwitchIsWaitedFor) {
  int client = -1, peer = -1;
  ASSERT_TRUE(test::loopback_connection(&client, &peer));
  TrackedSocket* t = fd_table().find(client);
  ASSERT_NE(t, nullptr);
  UpgradeSession* session = t->start_session();
  ASSERT_NE(session, nullptr);
  EXPECT_EQ(kind_of(client), Kind::kSession);
  EXPECT_EQ(route_of(SocketHold::of(client)).session(), session);
  EXPECT_TRUE(route_for_call(client).ours());
  EXPECT_EQ(t->path(), Path::kUpgradingOnTcp);

  uint64_t sent = 0, received = 0;
  bool ended = false;
  ASSERT_TRUE(session->freeze(&sent, &received, &ended));
  EXPECT_EQ(t->path(), Path::kSwitching);
  StreamRef switching = route_of(SocketHold::of(client));
  EXPECT_EQ(switching.kind(), Kind::kSwitching);
  EXPECT_EQ(switching.session(), nullptr);  // no call goes to TCP during the switch
  EXPECT_FALSE(switching.ours());

  // A call's resolver waits for the switch's end, then takes the route that is final (here the
  // kernel: finish() without a stream leaves the connection on TCP).
  std::atomic<bool> resolved{false};
  std::thread caller([&] {
    EXPECT_EQ(route_for_call(client).kind(), Kind::kKernel);
    resolved = true;
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(resolved);
  session->finish();
  caller.join();
  EXPECT_TRUE(resolved);
  EXPECT_EQ(t->path(), Path::kTcp);
  close(client);
  close(peer);
}

TEST(Route, APrefixIsReadBeforeTheKernel) {
  int client = -1, peer = -1;
  ASSERT_TRUE(test::loopback_connection(&client, &peer));
  TrackedSocket* t = fd_table().find(client);
  ASSERT_NE(t, nullptr);
  ASSERT_TRUE(t->prefix.set({'a', 'b'}, false));
  EXPECT_EQ(kind_of(client), Kind::kPrefixed);
  EXPECT_TRUE(route_for_call(client).ours());
  char got[2] = {};
  EXPECT_EQ(read(client, got, 2), 2);  // through the wrapper: the prefix
  EXPECT_EQ(got[0], 'a');
  EXPECT_EQ(kind_of(client), Kind::kKernel);  // used up: the kernel's from now on
  close(client);
  close(peer);
}

}  // namespace
}  // namespace tcp2rdma::preload
