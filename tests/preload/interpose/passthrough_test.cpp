// Every intercepted call that does not concern one of our streams must behave exactly like libc's:
// same results, same bytes, same errno. The wrappers are linked into this program (see CMakeLists).
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "libc/interposed.h"

namespace {

class PassThrough : public ::testing::Test {
 protected:
  int fds_[2] = {-1, -1};
  void SetUp() override { ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds_), 0); }
  void TearDown() override {
    close(fds_[0]);
    close(fds_[1]);
  }
};

TEST_F(PassThrough, EveryWriteVariantMeetsEveryReadVariant) {
  char buf[64] = {};
  ASSERT_EQ(write(fds_[0], "ab", 2), 2);
  ASSERT_EQ(read(fds_[1], buf, sizeof buf), 2);
  EXPECT_EQ(std::string(buf, 2), "ab");

  iovec out[2] = {{const_cast<char*>("cd"), 2}, {const_cast<char*>("ef"), 2}};
  ASSERT_EQ(writev(fds_[0], out, 2), 4);
  char x[3] = {}, y[1] = {};
  iovec in[2] = {{x, 3}, {y, 1}};
  ASSERT_EQ(readv(fds_[1], in, 2), 4);
  EXPECT_EQ(std::string(x, 3) + y[0], "cdef");

  ASSERT_EQ(send(fds_[0], "gh", 2, MSG_NOSIGNAL), 2);
  ASSERT_EQ(recv(fds_[1], buf, 1, MSG_PEEK), 1);
  ASSERT_EQ(recv(fds_[1], buf, sizeof buf, 0), 2);
  EXPECT_EQ(std::string(buf, 2), "gh");

  ASSERT_EQ(sendto(fds_[0], "ij", 2, 0, nullptr, 0), 2);
  ASSERT_EQ(recvfrom(fds_[1], buf, sizeof buf, 0, nullptr, nullptr), 2);
  EXPECT_EQ(std::string(buf, 2), "ij");

  iovec one{const_cast<char*>("kl"), 2};
  msghdr msg{};
  msg.msg_iov = &one;
  msg.msg_iovlen = 1;
  ASSERT_EQ(sendmsg(fds_[0], &msg, 0), 2);
  iovec back{buf, sizeof buf};
  msghdr rmsg{};
  rmsg.msg_iov = &back;
  rmsg.msg_iovlen = 1;
  ASSERT_EQ(recvmsg(fds_[1], &rmsg, 0), 2);
  EXPECT_EQ(std::string(buf, 2), "kl");

  mmsghdr many[2] = {};
  iovec parts[2] = {{const_cast<char*>("m"), 1}, {const_cast<char*>("n"), 1}};
  for (int i = 0; i < 2; ++i) {
    many[i].msg_hdr.msg_iov = &parts[i];
    many[i].msg_hdr.msg_iovlen = 1;
  }
  ASSERT_EQ(sendmmsg(fds_[0], many, 2, 0), 2);
  mmsghdr got[1] = {};
  got[0].msg_hdr.msg_iov = &back;
  got[0].msg_hdr.msg_iovlen = 1;
  ASSERT_EQ(recvmmsg(fds_[1], got, 1, 0, nullptr), 1);
  EXPECT_EQ(std::string(buf, got[0].msg_len), "mn");
}

TEST_F(PassThrough, FortifiedReadsForwardTheirBufferLength) {
  char buf[8] = {};
  ASSERT_EQ(write(fds_[0], "fortify", 7), 7);
  ASSERT_EQ(__read_chk(fds_[1], buf, 3, sizeof buf), 3);
  ASSERT_EQ(__recv_chk(fds_[1], buf, 2, sizeof buf, 0), 2);
  ASSERT_EQ(__recvfrom_chk(fds_[1], buf, 2, sizeof buf, 0, nullptr, nullptr), 2);
  EXPECT_EQ(std::string(buf, 2), "fy");
  pollfd p{fds_[0], POLLOUT, 0};
  EXPECT_EQ(__poll_chk(&p, 1, 0, sizeof p), 1);  // fdslen is in bytes
  EXPECT_EQ(__ppoll_chk(&p, 1, nullptr, nullptr, sizeof p), 1);
}

TEST_F(PassThrough, FortifiedReadBeyondItsBufferStillAborts) {
  // libc's check must still fire: the module forwards the length rather than dropping it.
  EXPECT_DEATH(
      {
        char buf[4];
        __read_chk(fds_[1], buf, 16, sizeof buf);
      },
      "buffer overflow");
}

TEST_F(PassThrough, ErrorsKeepTheirErrno) {
  char c;
  errno = 0;
  EXPECT_EQ(read(-1, &c, 1), -1);
  EXPECT_EQ(errno, EBADF);
  ASSERT_EQ(fcntl(fds_[1], F_SETFL, O_NONBLOCK), 0);
  EXPECT_EQ(fcntl(fds_[1], F_GETFL) & O_NONBLOCK, O_NONBLOCK);
  EXPECT_EQ(recv(fds_[1], &c, 1, 0), -1);
  EXPECT_EQ(errno, EAGAIN);
  EXPECT_EQ(shutdown(fds_[0], SHUT_WR), 0);
  EXPECT_EQ(read(fds_[1], &c, 1), 0);  // EOF after the peer's half-close
  EXPECT_EQ(send(fds_[0], "x", 1, MSG_NOSIGNAL), -1);
  EXPECT_EQ(errno, EPIPE);
  EXPECT_EQ(connect(fds_[0], nullptr, sizeof(sockaddr)), -1);
  EXPECT_EQ(errno, EFAULT);
}

TEST_F(PassThrough, IoctlAndSocketOptions) {
  ASSERT_EQ(write(fds_[0], "12345", 5), 5);
  int pending = -1;
  ASSERT_EQ(ioctl(fds_[1], FIONREAD, &pending), 0);
  EXPECT_EQ(pending, 5);
  int on = 1;
  ASSERT_EQ(ioctl(fds_[1], FIONBIO, &on), 0);
  EXPECT_EQ(fcntl(fds_[1], F_GETFL) & O_NONBLOCK, O_NONBLOCK);
  int size = 0;
  socklen_t len = sizeof size;
  ASSERT_EQ(getsockopt(fds_[0], SOL_SOCKET, SO_SNDBUF, &size, &len), 0);
  EXPECT_GT(size, 0);
  size = 65536;
  EXPECT_EQ(setsockopt(fds_[0], SOL_SOCKET, SO_SNDBUF, &size, sizeof size), 0);
}

TEST_F(PassThrough, ReadinessCalls) {
  pollfd p[2] = {{fds_[0], POLLOUT, 0}, {fds_[1], POLLIN, 0}};
  EXPECT_EQ(poll(p, 2, 0), 1);
  EXPECT_EQ(p[0].revents, POLLOUT);
  EXPECT_EQ(p[1].revents, 0);
  ASSERT_EQ(write(fds_[0], "r", 1), 1);
  timespec zero{};
  EXPECT_EQ(ppoll(p, 2, &zero, nullptr), 2);

  fd_set rd;
  FD_ZERO(&rd);
  FD_SET(fds_[1], &rd);
  timeval tv{};
  EXPECT_EQ(select(fds_[1] + 1, &rd, nullptr, nullptr, &tv), 1);
  EXPECT_EQ(pselect(fds_[1] + 1, &rd, nullptr, nullptr, &zero, nullptr), 1);

  int ep = epoll_create1(EPOLL_CLOEXEC);
  ASSERT_GE(ep, 0);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fds_[1];
  ASSERT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, fds_[1], &ev), 0);
  epoll_event out[2];
  EXPECT_EQ(epoll_wait(ep, out, 2, 0), 1);
  EXPECT_EQ(epoll_pwait(ep, out, 2, 0, nullptr), 1);
  EXPECT_EQ(epoll_pwait2(ep, out, 2, &zero, nullptr), 1);
  EXPECT_EQ(out[0].data.fd, fds_[1]);
  int legacy = epoll_create(1);
  EXPECT_GE(legacy, 0);
  close(legacy);
  close(ep);
}

TEST_F(PassThrough, SendfileFromAFile) {
  char path[] = "/tmp/t2r-sendfile-XXXXXX";  // a host unit test: the host's /tmp
  int file = mkstemp(path);
  ASSERT_GE(file, 0);
  unlink(path);
  ASSERT_EQ(write(file, "sendfile!", 9), 9);
  off_t offset = 4;
  EXPECT_EQ(sendfile(fds_[0], file, &offset, 5), 5);
  off64_t offset64 = 0;
  EXPECT_EQ(sendfile64(fds_[0], file, &offset64, 4), 4);
  char buf[16] = {};
  ASSERT_EQ(read(fds_[1], buf, sizeof buf), 9);
  EXPECT_EQ(std::string(buf, 9), "file!send");
  close(file);
}

TEST_F(PassThrough, ForkAndVforkReturnInBothProcesses) {
  for (auto* spawn : {&fork, &vfork}) {
    pid_t pid = spawn();
    ASSERT_GE(pid, 0);
    if (pid == 0) _exit(42);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 42);
  }
}

}  // namespace
