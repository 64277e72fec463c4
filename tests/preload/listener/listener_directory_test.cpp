// The pre-fork directory (preload/listener_directory.h) on the host: who holds the port, where each
// connection's request is to be sent, and what a process that dies leaves behind, across real forks.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "listener/listener_directory.h"

namespace tcp2rdma::preload {
namespace {

transport::TcpTuple tuple(uint16_t client_port) {
  transport::TcpTuple t{};
  t.family = AF_INET;
  t.client_port = client_port;
  t.server_port = 5019;
  t.client_addr[0] = 10;
  t.server_addr[0] = 10;
  return t;
}

// Runs f in a forked child and returns its exit status (the child's view of the shared memory).
template <typename F>
int in_child(F f) {
  pid_t pid = fork();
  if (pid == 0) _exit(f());
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 99;
}

struct Directory {
  int memfd = -1;
  ListenerDirectory* d = ListenerDirectory::create(&memfd);
  ~Directory() {
    ListenerDirectory::unmap(d);
    if (memfd >= 0) close(memfd);
  }
};

TEST(ListenerDirectory, OneLiveHolderAtATime) {
  Directory dir;
  ASSERT_NE(dir.d, nullptr);
  EXPECT_EQ(dir.d->holder(), 0);
  EXPECT_TRUE(dir.d->claim_holder(getpid()));
  EXPECT_TRUE(dir.d->claim_holder(getpid()));  // claiming again is harmless
  // A child (another process of the family) sees the parent holding it.
  EXPECT_EQ(in_child([&] { return dir.d->claim_holder(getpid()) ? 1 : 0; }), 0);
  dir.d->release_holder(getpid());
  EXPECT_EQ(dir.d->holder(), 0);
  // A child takes it and exits: a dead holder's place is free again.
  EXPECT_EQ(in_child([&] { return dir.d->claim_holder(getpid()) ? 0 : 1; }), 0);
  EXPECT_NE(dir.d->holder(), 0);
  EXPECT_TRUE(dir.d->claim_holder(getpid()));
  EXPECT_EQ(dir.d->holder(), getpid());
}

TEST(ListenerDirectory, ItsMemfdMapsTheSameDirectoryAgain) {
  // As a new program that a process of the family exec'd maps it (process/exec_returns.h).
  Directory dir;
  ASSERT_NE(dir.d, nullptr);
  ASSERT_GE(dir.memfd, 0);
  EXPECT_EQ(fcntl(dir.memfd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  ListenerDirectory* again = ListenerDirectory::map(dir.memfd);
  ASSERT_NE(again, nullptr);
  ASSERT_NE(again, dir.d);
  EXPECT_TRUE(dir.d->claim_holder(getpid()));
  EXPECT_EQ(again->holder(), getpid());
  EXPECT_TRUE(again->publish(tuple(4100), 7100, getpid()));
  EXPECT_EQ(dir.d->port_for(tuple(4100)), 7100);
  ListenerDirectory::unmap(again);
  // Anything else is not a directory.
  int other = static_cast<int>(memfd_create("other", MFD_CLOEXEC));
  ASSERT_GE(other, 0);
  EXPECT_EQ(ListenerDirectory::map(other), nullptr);  // empty
  ASSERT_EQ(ftruncate(other, 4096), 0);
  EXPECT_EQ(ListenerDirectory::map(other), nullptr);  // the wrong size
  close(other);
}

TEST(ListenerDirectory, AnExitedProcessIsNotAliveBeforeItIsReaped) {
  EXPECT_TRUE(process_alive(getpid()));
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  // A zombie until waited for: the holder's place must be free already.
  for (int i = 0; i < 500 && process_alive(pid); ++i) usleep(2000);
  EXPECT_FALSE(process_alive(pid));
  waitpid(pid, nullptr, 0);
  EXPECT_FALSE(process_alive(pid));
}

TEST(ListenerDirectory, PublishedTuplesAreSeenByTheOtherProcesses) {
  Directory dir;
  ASSERT_NE(dir.d, nullptr);
  EXPECT_EQ(dir.d->port_for(tuple(40000)), 0);
  // A worker publishes; the holder (here the parent) reads it while the worker waits.
  int ready[2], done[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(done), 0);
  pid_t pid = fork();
  if (pid == 0) {
    bool ok = dir.d->publish(tuple(40000), 20001, getpid());
    char c = ok ? 'y' : 'n';
    if (write(ready[1], &c, 1) != 1 || read(done[0], &c, 1) != 1) _exit(2);
    dir.d->withdraw(tuple(40000), getpid());
    _exit(ok ? 0 : 1);
  }
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  EXPECT_EQ(c, 'y');
  EXPECT_EQ(dir.d->port_for(tuple(40000)), 20001);
  EXPECT_EQ(dir.d->port_for(tuple(40001)), 0);  // another connection
  ASSERT_EQ(write(done[1], &c, 1), 1);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(dir.d->port_for(tuple(40000)), 0);  // withdrawn
  for (int fd : {ready[0], ready[1], done[0], done[1]}) close(fd);
}

TEST(ListenerDirectory, WithdrawOnlyTakesTheCallersOwnEntry) {
  Directory dir;
  ASSERT_NE(dir.d, nullptr);
  ASSERT_TRUE(dir.d->publish(tuple(40010), 20010, getpid()));
  dir.d->withdraw(tuple(40010), getpid() + 1);
  EXPECT_EQ(dir.d->port_for(tuple(40010)), 20010);
  dir.d->withdraw(tuple(40010), getpid());
  EXPECT_EQ(dir.d->port_for(tuple(40010)), 0);
}

TEST(ListenerDirectory, AFullTableTakesBackTheEntriesOfDeadProcesses) {
  Directory dir;
  ASSERT_NE(dir.d, nullptr);
  // A child fills every entry and dies without withdrawing any.
  int filled = in_child([&] {
    for (size_t i = 0; i < ListenerDirectory::kEntries; ++i) {
      if (!dir.d->publish(tuple(static_cast<uint16_t>(1000 + i)), 20000, getpid())) return 1;
    }
    return dir.d->publish(tuple(999), 20000, getpid()) ? 1 : 0;  // one more does not fit
  });
  EXPECT_EQ(filled, 0);
  EXPECT_EQ(dir.d->port_for(tuple(1000)), 20000);  // still there: nobody needed the room
  ASSERT_TRUE(dir.d->publish(tuple(50000), 20002, getpid()));
  EXPECT_EQ(dir.d->port_for(tuple(50000)), 20002);
  EXPECT_EQ(dir.d->port_for(tuple(1000)), 0);  // the dead child's entries were taken back
  // A full table of a live process's entries refuses.
  for (size_t i = 1; i < ListenerDirectory::kEntries; ++i) {
    ASSERT_TRUE(dir.d->publish(tuple(static_cast<uint16_t>(2000 + i)), 20003, getpid()));
  }
  EXPECT_FALSE(dir.d->publish(tuple(3000), 20003, getpid()));
}

TEST(ListenerDirectory, AProcessThatDiesHoldingTheLockDoesNotStopTheOthers) {
  Directory dir;
  ASSERT_NE(dir.d, nullptr);
  // The mutex is the directory's first member; a child takes it and dies inside.
  auto* mutex = reinterpret_cast<pthread_mutex_t*>(dir.d);
  EXPECT_EQ(in_child([&] { return pthread_mutex_lock(mutex); }), 0);
  EXPECT_TRUE(dir.d->publish(tuple(40020), 20020, getpid()));
  EXPECT_EQ(dir.d->port_for(tuple(40020)), 20020);
}

}  // namespace
}  // namespace tcp2rdma::preload
