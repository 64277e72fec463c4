// The module's threads block every signal, and starting one leaves the application's signals as
// they were: an ignored signal that arrives meanwhile is discarded, never kept to interrupt another
// thread's call with EINTR (preload/util/quiet_thread.h).
#include "util/quiet_thread.h"

#include <gtest/gtest.h>
#include <dirent.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <set>
#include <thread>

#include "credential_epoch.h"

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

// Another thread asleep in epoll_wait (on an empty set, 200 ms at a time) for the test's length,
// counting the waits that ended with EINTR.
class InterruptCounter {
 public:
  InterruptCounter() : ep_(epoll_create1(EPOLL_CLOEXEC)), thread_([this] { sleep_and_count(); }) {}
  ~InterruptCounter() { stop(); }
  bool sleeping() const { return ep_ >= 0; }  // its set could be made
  // Ends the sleeps; how many were interrupted.
  int stop() {
    done_ = true;
    if (thread_.joinable()) thread_.join();
    if (ep_ >= 0) close(ep_);
    ep_ = -1;
    return interrupted_.load();
  }

 private:
  void sleep_and_count() {
    while (!done_.load()) {
      epoll_event ev{};
      if (epoll_wait(ep_, &ev, 1, 200) < 0 && errno == EINTR) ++interrupted_;
    }
  }
  int ep_;
  std::atomic<bool> done_{false};
  std::atomic<int> interrupted_{0};
  std::thread thread_;
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
  InterruptCounter sleeper;
  ASSERT_TRUE(sleeper.sleeping());
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
  EXPECT_EQ(sleeper.stop(), 0);
}

// The same while ours are made: glibc's pthread_create blocks every signal in the creating thread
// around its clone, so a child that exits then had its SIGCHLD kept and handed to another thread
// (seen: a client's epoll_wait failed with EINTR when its forked child exited at once, the fork
// having started the module's claim service). Ours are made by a starter thread of the module's:
// the application's thread never holds a signal so. Each round forks a child that exits at once
// while this thread starts module threads back to back, so that the exit falls inside creations.
TEST(QuietThread, AChildExitingWhileOnesAreMadeInterruptsNoOtherThread) {
  Disposition chld(SIGCHLD, SIG_DFL);
  InterruptCounter sleeper;
  ASSERT_TRUE(sleeper.sleeping());
  std::thread first = start_quiet_thread([] {});  // the starter is made on first use: before any child
  ASSERT_TRUE(first.joinable());
  first.join();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the sleeper is inside epoll_wait
  for (int round = 0; round < 100; ++round) {
    pid_t child = fork();
    if (child == 0) _exit(0);
    ASSERT_GT(child, 0);
    for (int i = 0; i < 20; ++i) {
      std::thread t = start_quiet_thread([] {});
      ASSERT_TRUE(t.joinable());
      t.join();
    }
    waitpid(child, nullptr, 0);
  }
  EXPECT_EQ(sleeper.stop(), 0);
}

// The threads of this process.
std::set<pid_t> tasks() {
  std::set<pid_t> ids;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return ids;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ids.insert(static_cast<pid_t>(std::atoi(entry->d_name)));
  }
  closedir(dir);
  return ids;
}

// A thread shares the cred object of the thread that made it, and after a change of credentials the
// kernel refuses an RDMA device's writes from any cred object but the one that opened it: the
// threads made after a change must not come from a starter made before it (seen: an rsync daemon's
// child that dropped to nobody could not bring its connections back to RDMA). After the change the
// next thread made brings a new starter, and the old one's thread ends.
TEST(QuietThread, AChangeOfCredentialsBringsANewStarterAndEndsTheOld) {
  std::thread first = start_quiet_thread([] {});
  ASSERT_TRUE(first.joinable());
  first.join();
  std::set<pid_t> before = tasks();  // this thread, gtest's, and the starter
  transport::note_credentials_changed();
  std::thread second = start_quiet_thread([] {});
  ASSERT_TRUE(second.joinable());
  second.join();
  std::set<pid_t> after;
  for (int i = 0; i < 200; ++i) {  // the old starter ends once it sees it was replaced
    after = tasks();
    if (after.size() == before.size()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(after.size(), before.size());
  EXPECT_NE(after, before);  // one starter for another
}

}  // namespace
}  // namespace tcp2rdma::preload
