// The module's threads block every signal, and starting one leaves the application's signals as
// they were: an ignored signal that arrives meanwhile is discarded, never kept to interrupt another
// thread's call with EINTR (preload/util/quiet_thread.h).
#include "util/quiet_thread.h"

#include <gtest/gtest.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <thread>

namespace tcp2rdma::preload {
namespace {

void on_usr1(int) {}

// Sets sig's disposition for the test's length.
class Disposition {
 public:
  Disposition(int sig, void (*handler)(int)) : sig_(sig) {
    struct sigaction action {};
    action.sa_handler = handler;
    sigemptyset(&action.sa_mask);
    sigaction(sig, &action, &before_);
  }
  ~Disposition() { sigaction(sig_, &before_, nullptr); }

 private:
  int sig_;
  struct sigaction before_ {};
};

TEST(QuietThread, StartingOneHoldsOnlySignalsTheKernelWouldNotDiscard) {
  Disposition chld(SIGCHLD, SIG_DFL), pipe(SIGPIPE, SIG_IGN), usr1(SIGUSR1, on_usr1);
  sigset_t held = signals_held_while_starting();
  EXPECT_FALSE(sigismember(&held, SIGCHLD));  // ignored by default
  EXPECT_FALSE(sigismember(&held, SIGWINCH));
  EXPECT_FALSE(sigismember(&held, SIGPIPE));  // ignored by the application
  EXPECT_TRUE(sigismember(&held, SIGUSR1));   // its handler must not run on our thread
  EXPECT_TRUE(sigismember(&held, SIGTERM));   // the default ends the process: whoever takes it
}

TEST(QuietThread, RunsWithEverySignalBlocked) {
  Disposition chld(SIGCHLD, SIG_DFL);
  sigset_t mask;
  sigemptyset(&mask);
  std::thread t = start_quiet_thread([&mask] { pthread_sigmask(SIG_BLOCK, nullptr, &mask); });
  ASSERT_TRUE(t.joinable());
  t.join();
  EXPECT_TRUE(sigismember(&mask, SIGCHLD));
  EXPECT_TRUE(sigismember(&mask, SIGUSR1));
  EXPECT_TRUE(sigismember(&mask, SIGTERM));
}

// A child that exits while its parent's thread starts one of ours (holds the signals it holds
// meanwhile): its SIGCHLD, ignored by default, interrupted another thread's epoll_wait when the
// starting thread blocked every signal (seen in an event-loop client whose forked child exited at
// once). The child's exit is waited for inside the hold, so the signal always arrives there.
TEST(QuietThread, AChildExitingWhileOneStartsInterruptsNoOtherThread) {
  Disposition chld(SIGCHLD, SIG_DFL);
  int ep = epoll_create1(EPOLL_CLOEXEC);
  ASSERT_GE(ep, 0);
  std::atomic<bool> done{false};
  std::atomic<int> interrupted{0};
  std::thread sleeper([&] {
    while (!done.load()) {
      epoll_event ev{};
      if (epoll_wait(ep, &ev, 1, 200) < 0 && errno == EINTR) ++interrupted;
    }
  });
  for (int i = 0; i < 5; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the sleeper is inside epoll_wait
    {
      SignalsHeld held(signals_held_while_starting());
      pid_t child = fork();
      if (child == 0) _exit(0);
      ASSERT_GT(child, 0);
      siginfo_t info{};
      waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT);  // it exited; SIGCHLD was sent
    }
    waitpid(-1, nullptr, 0);
  }
  done = true;
  sleeper.join();
  close(ep);
  EXPECT_EQ(interrupted.load(), 0);
}

}  // namespace
}  // namespace tcp2rdma::preload
