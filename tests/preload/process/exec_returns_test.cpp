// What an exec hands on for a connection's return to RDMA (process/exec_returns.h), on loopback TCP
// on the host: the new program's module parses the variable, tracks the connection's descriptors as
// one socket, maps the listener directory's memfd, and never touches a descriptor the variable names
// that is not what it should be. Loopback connections stay TCP by the built-in rule, so the return
// itself is not planned here; integration.children_let_go.pair plans and runs it (socat's inetd shape).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "listener/listener_directory.h"
#include "process/exec_guard.h"
#include "process/exec_returns.h"
#include "registry/fd_table.h"
#include "registry/socket_registry.h"
#include "registry/tracked_socket.h"
#include "test_sockets.h"

namespace tcp2rdma::preload {
namespace {

class ExecReturns : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(test::loopback_connection(&ours_, &peer_));
    // As the new program finds it: a descriptor it inherited, which its module has never seen.
    track_close(ours_);
  }
  void TearDown() override {
    close(ours_);
    close(peer_);
  }
  int ours_ = -1;
  int peer_ = -1;
};

// An inheritable copy of a new directory's memfd, as an exec'ing process hands it on.
int directory_memfd() {
  int memfd = -1;
  ListenerDirectory* d = ListenerDirectory::create(&memfd);
  if (d == nullptr || memfd < 0) return -1;
  ListenerDirectory::unmap(d);
  int copy = dup(memfd);  // without FD_CLOEXEC, as exec keeps it
  close(memfd);
  return copy;
}

TEST_F(ExecReturns, DescriptorsOfOneConnectionBecomeOneSocketAndTheVariableGoes) {
  int copy = dup(ours_);
  track_close(copy);
  int memfd = directory_memfd();
  ASSERT_GE(memfd, 0);
  std::string value = std::to_string(ours_) + ":s:1:" + std::to_string(memfd) + ":0:0:0:0:0:0," + std::to_string(copy) +
                      ":s:1:" + std::to_string(memfd) + ":0:0:0:0:0:0";
  setenv(kExecReturnVariable, value.c_str(), 1);
  adopt_exec_returns();
  EXPECT_EQ(std::getenv(kExecReturnVariable), nullptr);  // a later exec starts afresh
  ASSERT_NE(fd_table().find(ours_), nullptr);
  EXPECT_EQ(fd_table().find(copy), fd_table().find(ours_));
  // Loopback stays TCP by the rules of this program: no return planned, and the directory, of no use
  // here, is let go of.
  EXPECT_FALSE(fd_table().find(ours_)->returns.armed());
  EXPECT_EQ(fcntl(memfd, F_GETFD), -1);
  // The connection works as before.
  ASSERT_EQ(write(peer_, "x", 1), 1);
  char c = 0;
  ASSERT_EQ(read(copy, &c, 1), 1);
  EXPECT_EQ(c, 'x');
  close(copy);
}

TEST_F(ExecReturns, WhatTheVariableNamesWronglyIsLeftAlone) {
  // A left-over variable (a program without the module in between) may name anything: a pipe where
  // a memfd should be, a pipe where a connection should be, words that do not parse.
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  int other = static_cast<int>(memfd_create("not-ours", 0));  // a memfd of the application's
  ASSERT_GE(other, 0);
  int stranger = socket(AF_INET, SOCK_STREAM, 0);  // named as a copy of ours_, which it is not
  ASSERT_GE(stranger, 0);
  track_close(stranger);
  std::string value = std::to_string(ours_) + ":c:1:" + std::to_string(pipe_fds[0]) + ":0:0:0:0:0:0," +
                      std::to_string(stranger) + ":c:1:-1:0:0:0:0:0:0," +
                      std::to_string(pipe_fds[1]) + ":c:1:-1:1:0:0:0:0:0,junk,7:x:1:-1:2:0:0:0:0:0," + std::to_string(peer_) +
                      ":u:1:" + std::to_string(other) + ":3:10:20:0:0:0";
  setenv(kExecReturnVariable, value.c_str(), 1);
  track_close(peer_);
  adopt_exec_returns();
  EXPECT_EQ(fcntl(pipe_fds[0], F_GETFD), 0);  // still open, close-on-exec untouched
  EXPECT_EQ(fcntl(other, F_GETFD), 0);
  EXPECT_EQ(fd_table().find(pipe_fds[1]), nullptr);
  EXPECT_NE(fd_table().find(ours_), nullptr);
  EXPECT_EQ(fd_table().find(stranger), nullptr);
  close(stranger);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  close(other);
}

TEST(ExecEnvironment, TheVariableReplacesAnEarlierOneAndKeepsTheRest) {
  std::string first = "A=1", stale = std::string(kExecReturnVariable) + "=9:c:0:-1:0:0:0:0:0:0", last = "B=2";
  std::vector<char*> base{first.data(), stale.data(), last.data(), nullptr};
  std::string entry = std::string(kExecReturnVariable) + "=3:s:1:200:0:0:0:0:0:0";
  std::vector<char*> storage;
  char* const* env = environment_with(base.data(), entry, &storage);
  std::vector<std::string> got;
  for (char* const* e = env; *e != nullptr; ++e) got.emplace_back(*e);
  EXPECT_EQ(got, (std::vector<std::string>{"A=1", "B=2", entry}));
}

TEST_F(ExecReturns, NothingGoesAlongForAConnectionWithoutAPlannedReturn) {
  track_new_socket(ours_, AF_INET, SocketRole::kClient);
  ReturnHandOn returns(/*module_follows=*/true);
  EXPECT_FALSE(returns.add(fd_table().find(ours_), ours_));  // never on RDMA: nothing to return to
  std::string only = "A=1";
  std::vector<char*> base{only.data(), nullptr};
  EXPECT_EQ(returns.envp(base.data()), base.data());
}

}  // namespace
}  // namespace tcp2rdma::preload
