// Who else holds a socket (registry/socket_holders.h): read from a directory laid out as /proc, and
// from the real /proc with a forked child.
#include "registry/socket_holders.h"

#include "registry/fork_share.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace tcp2rdma::preload {
namespace {

// A stand-in for /proc: PID/stat with its parent, PID/fd/N links to what each descriptor names.
class FakeProc {
 public:
  FakeProc() {
    char tmpl[] = "/tmp/t2r-proc.XXXXXX";
    root_ = mkdtemp(tmpl);
  }
  ~FakeProc() { std::system(("rm -rf " + root_).c_str()); }
  void process(int pid, int ppid) {
    std::string dir = root_ + "/" + std::to_string(pid);
    mkdir(dir.c_str(), 0755);
    mkdir((dir + "/fd").c_str(), 0755);
    std::ofstream(dir + "/stat") << pid << " (a name) with) S " << ppid << " 1 1 0\n";
  }
  void descriptor(int pid, int fd, const std::string& target) {
    std::string link = root_ + "/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
    ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  }
  // A process whose descriptors cannot be listed (as one of another user's, or one that changed its
  // credentials): its fd directory is a file.
  void hidden(int pid, int ppid) {
    std::string dir = root_ + "/" + std::to_string(pid);
    mkdir(dir.c_str(), 0755);
    std::ofstream(dir + "/fd") << "";
    std::ofstream(dir + "/stat") << pid << " (hidden) S " << ppid << " 1 1 0\n";
  }
  const char* path() const { return root_.c_str(); }

 private:
  std::string root_;
};

TEST(SocketHolders, TheSocketsOfOtherProcessesAreListedAndOursAreNot) {
  FakeProc proc;
  proc.process(100, 1);  // this process
  proc.descriptor(100, 3, "socket:[500]");
  proc.process(101, 100);  // a child that holds 501
  proc.descriptor(101, 0, "/dev/null");
  proc.descriptor(101, 7, "socket:[501]");
  proc.descriptor(101, 8, "pipe:[502]");
  HeldSockets held;
  ASSERT_TRUE(scan_held_sockets(proc.path(), 100, &held));
  EXPECT_EQ(held.of(500), Holders::kThisProcessOnly);
  EXPECT_EQ(held.of(501), Holders::kOthers);
  EXPECT_EQ(held.of(502), Holders::kThisProcessOnly);  // a pipe's number is not a socket's
}

TEST(SocketHolders, AProcessThatCannotBeLookedAtCountsOnlyIfOfOurFamily) {
  FakeProc proc;
  proc.process(100, 1);
  proc.hidden(300, 1);  // another user's, unrelated
  HeldSockets held;
  ASSERT_TRUE(scan_held_sockets(proc.path(), 100, &held));
  EXPECT_EQ(held.of(500), Holders::kThisProcessOnly);
  proc.process(101, 100);
  proc.hidden(102, 101);  // our grandchild, after it changed its credentials
  ASSERT_TRUE(scan_held_sockets(proc.path(), 100, &held));
  EXPECT_EQ(held.of(500), Holders::kUnknown);
}

TEST(SocketHolders, AnAncestorThatCannotBeLookedAtCountsForWhatItMade) {
  FakeProc proc;
  proc.hidden(50, 1);   // our parent, of another user
  proc.process(100, 50);
  HeldSockets held;
  ASSERT_TRUE(scan_held_sockets(proc.path(), 100, &held));
  EXPECT_EQ(held.of(500, /*creator=*/50, /*self=*/100), Holders::kUnknown);  // inherited from it
  EXPECT_EQ(held.of(500, /*creator=*/0, /*self=*/100), Holders::kThisProcessOnly);  // made here since
}

TEST(SocketHolders, AHiddenAncestorAboveTheSocketsCreatorDoesNotCount) {
  // `sudo -u nobody server`, or a root shell that started it: the server (100) accepted the
  // connection after sudo (50) forked it, and its child (101) inherited it; sudo cannot hold it.
  FakeProc proc;
  proc.hidden(50, 1);
  proc.process(100, 50);
  proc.process(101, 100);
  HeldSockets held;
  ASSERT_TRUE(scan_held_sockets(proc.path(), 101, &held));
  EXPECT_EQ(held.of(500, /*creator=*/100, /*self=*/101), Holders::kThisProcessOnly);
  EXPECT_EQ(held.of(500, /*creator=*/0, /*self=*/101), Holders::kThisProcessOnly);  // the child's own
  // One sudo made (or one whose creator is not an ancestor any more) may be sudo's too.
  EXPECT_EQ(held.of(500, /*creator=*/50, /*self=*/101), Holders::kUnknown);
  EXPECT_EQ(held.of(500, /*creator=*/77, /*self=*/101), Holders::kUnknown);
  // A hidden process between the creator and us (the creator's child that changed its credentials,
  // then forked us) may hold it.
  proc.hidden(102, 100);
  proc.process(103, 102);
  ASSERT_TRUE(scan_held_sockets(proc.path(), 103, &held));
  EXPECT_EQ(held.of(500, /*creator=*/100, /*self=*/103), Holders::kUnknown);
}

TEST(SocketHolders, InitThatCannotBeLookedAtDoesNotCount) {
  // An unprivileged process cannot list init's descriptors; init is every process's ancestor.
  FakeProc proc;
  proc.hidden(1, 0);
  proc.process(100, 1);
  HeldSockets held;
  ASSERT_TRUE(scan_held_sockets(proc.path(), 100, &held));
  EXPECT_EQ(held.of(500), Holders::kThisProcessOnly);
}

TEST(SocketHolders, AForkedChildHoldsTheSocketUntilItClosesIt) {
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  EXPECT_EQ(socket_holders(pair[0]), Holders::kThisProcessOnly);
  note_forking();  // as the module's fork wrapper does first
  pid_t child = fork();
  if (child == 0) {
    char c;
    (void)read(go[0], &c, 1);  // holds pair[0] until told
    close(pair[0]);
    (void)read(go[0], &c, 1);
    _exit(0);
  }
  EXPECT_EQ(socket_holders(pair[0]), Holders::kOthers);  // the fork is seen, not a scan from before it
  ASSERT_EQ(write(go[1], "x", 1), 1);
  usleep(100000);
  sleep(1);  // one scan a second
  EXPECT_EQ(socket_holders(pair[0]), Holders::kThisProcessOnly);
  ASSERT_EQ(write(go[1], "x", 1), 1);
  waitpid(child, nullptr, 0);
  close(pair[0]);
  close(pair[1]);
}

}  // namespace
}  // namespace tcp2rdma::preload
