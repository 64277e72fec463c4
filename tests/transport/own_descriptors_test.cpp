// The module's own descriptors live above the application's RLIMIT_NOFILE (own_descriptors.h): the
// application can open exactly as many descriptors as without the module, and gets the low numbers.
// Each case runs in a forked child, whose limits and descriptors are its own.
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <grp.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <vector>

#include "own_descriptors.h"

namespace tcp2rdma::transport {
namespace {

// Runs body in a child with a soft limit of `soft` (hard left alone); the child's exit status is
// the number of the first failed check (0: all held).
template <typename Body>
int in_child(rlim_t soft, Body body) {
  pid_t pid = fork();
  if (pid == 0) {
    rlimit r{};
    getrlimit(RLIMIT_NOFILE, &r);
    r.rlim_cur = soft;
    if (setrlimit(RLIMIT_NOFILE, &r) != 0) _exit(100);
    _exit(body());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 200;
}

// How many descriptors the application can still open (until EMFILE), closed again afterwards.
int how_many_can_open() {
  std::vector<int> fds;
  for (;;) {
    int fd = ::open("/dev/null", O_RDONLY);
    if (fd < 0) break;
    fds.push_back(fd);
  }
  for (int fd : fds) ::close(fd);
  return static_cast<int>(fds.size());
}

bool hard_limit_can_rise() {
  rlimit r{};
  getrlimit(RLIMIT_NOFILE, &r);
  rlimit up{r.rlim_max + 1, r.rlim_max + 1};
  bool ok = setrlimit(RLIMIT_NOFILE, &up) == 0;
  if (ok) setrlimit(RLIMIT_NOFILE, &r);
  return ok;
}

TEST(OwnDescriptors, LiveAboveTheApplicationsLimitAndTakeNothingFromIt) {
  rlimit r{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &r), 0);
  if (r.rlim_max < 512 && !hard_limit_can_rise()) GTEST_SKIP() << "no room above a limit of 128 here";
  EXPECT_EQ(in_child(128, [] {
              int before = how_many_can_open();
              std::vector<int> ours;
              for (int i = 0; i < 300; ++i) {  // more than the application's whole range
                OwnDescriptors window;
                int fd = window.place(eventfd(0, 0));
                if (fd < 128) return 1;
                ours.push_back(fd);
              }
              rlimit now{};
              getrlimit(RLIMIT_NOFILE, &now);
              if (now.rlim_cur != 128) return 2;  // the application's limit, as it set it
              if (how_many_can_open() != before) return 3;  // exactly as many as without the module
              for (int fd : ours) {
                if ((fcntl(fd, F_GETFD) & FD_CLOEXEC) == 0) return 4;
                uint64_t one = 1;
                if (write(fd, &one, sizeof one) != sizeof one) return 5;  // valid above the limit
              }
              return 0;
            }),
            0);
}

TEST(OwnDescriptors, TheApplicationAtItsLimitStillGetsOne) {
  rlimit r{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &r), 0);
  if (r.rlim_max < 512 && !hard_limit_can_rise()) GTEST_SKIP() << "no room above a limit of 64 here";
  EXPECT_EQ(in_child(64, [] {
              std::vector<int> theirs;
              for (int fd; (fd = ::open("/dev/null", O_RDONLY)) >= 0;) theirs.push_back(fd);
              OwnDescriptors window;  // made while every number below the limit is taken
              int fd = window.place(eventfd(0, 0));
              return fd >= 64 ? 0 : 1;
            }),
            0);
}

// With soft = hard and no way to raise the hard limit (memcached after `-u nobody`; here a child that
// drops root first), the module takes the highest free numbers of the application's range, at most
// top_reserve() of them, and the application can open exactly that many fewer.
TEST(OwnDescriptors, WithNoRoomAboveTheLimitTheTopOfTheRangeServes) {
  rlimit r{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &r), 0);
  EXPECT_EQ(in_child(r.rlim_max, [] {
              if (geteuid() == 0 && (setgroups(0, nullptr) != 0 || setgid(65534) != 0 || setuid(65534) != 0)) return 10;
              rlimit both{128, 128};
              if (setrlimit(RLIMIT_NOFILE, &both) != 0) return 11;
              if (hard_limit_can_rise()) return 12;
              unsigned long reserve = OwnDescriptors::top_reserve(128);
              if (reserve != 16) return 13;
              int before = how_many_can_open();
              std::vector<int> ours;
              for (unsigned long i = 0; i < reserve; ++i) {
                OwnDescriptors window;
                int fd = window.place(eventfd(0, 0));
                if (fd < static_cast<int>(128 - reserve) || fd >= 128) return 1;  // the top, highest first
                if (!ours.empty() && fd != ours.back() - 1) return 2;
                ours.push_back(fd);
              }
              if (how_many_can_open() != before - static_cast<int>(reserve)) return 3;
              if (own_descriptors_at_top() != reserve) return 7;
              ::close(ours[0]);
              if (own_descriptors_at_top() != reserve - 1) return 8;  // closed: no longer counted
              int theirs = ::open("/dev/null", O_RDONLY);  // the application's, at the top now
              if (own_descriptors_at_top() != reserve - 1) return 9;  // a number reused is not ours
              ::close(theirs);
              ours[0] = -1;
              {
                OwnDescriptors refill;
                ours[0] = refill.place(eventfd(0, 0));
              }
              OwnDescriptors window;  // the reserve is full: no more
              int fd = eventfd(0, 0);
              if (window.place(fd) != -1 || errno != EMFILE) return 4;
              if (fcntl(fd, F_GETFD) != -1) return 5;  // closed, not leaked
              rlimit now{};
              getrlimit(RLIMIT_NOFILE, &now);
              if (now.rlim_cur != 128 || now.rlim_max != 128) return 6;
              return 0;
            }),
            0);
}

}  // namespace
}  // namespace tcp2rdma::transport
