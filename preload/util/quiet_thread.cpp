#include "util/quiet_thread.h"

#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <new>

#include "credential_epoch.h"
#include "keep_forever.h"
#include "util/saved_errno.h"

namespace tcp2rdma::preload {

namespace {

// The signals whose default action is to be ignored: the kernel discards them on arrival, unless
// they are blocked.
bool ignored_by_default(int sig) { return sig == SIGCHLD || sig == SIGCONT || sig == SIGURG || sig == SIGWINCH; }

std::thread make_thread(std::function<void()> body) noexcept {
  try {
    return std::thread([body = std::move(body)]() mutable {
      block_all_signals();
      body();
    });
  } catch (const std::exception&) {  // std::system_error, std::bad_alloc
    return std::thread();
  }
}

// The thread that creates the module's threads (start_module_thread), one a process and credential
// epoch. A caller hands it a job and waits for the thread it made. A forked child has no starter
// thread; after a change of credentials the starter has a cred object of its own (the kernel gives
// each thread one), which the threads it made would share, and the kernel refuses an RDMA device's
// writes from any cred object but the one that opened it (transport/credential_epoch.h). Either way
// the first thread that needs one makes a new starter, as it makes the device contexts anew.
struct Starter {
  explicit Starter(transport::Epoch made_in) : epoch(made_in) {}
  const transport::Epoch epoch;
  enum State { kStarting, kRunning, kFailed };
  std::atomic<State> state{kStarting};
  struct Job {
    std::function<void()>* body;
    std::thread made;
    bool done = false;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Job*> jobs;
  bool retired = false;  // under mu: a newer epoch's starter replaced it; its thread ends when idle
};

std::atomic<Starter*> g_starter{nullptr};

void run_starter(Starter* s) {
  std::unique_lock lock(s->mu);
  for (;;) {
    s->cv.wait(lock, [s] { return !s->jobs.empty() || s->retired; });
    if (s->jobs.empty()) return;  // retired
    Starter::Job* job = s->jobs.front();
    s->jobs.pop_front();
    job->made = make_thread(std::move(*job->body));
    job->done = true;
    s->cv.notify_all();
  }
}

// A starter of an older epoch, replaced: this process's own ends its thread; a parent's (whose lock
// a thread of the parent may have held at the fork) is left alone. Neither is freed: a caller may
// still be about to look at it.
void retire(Starter* old, pid_t here) noexcept {
  if (old == nullptr) return;
  if (old->epoch.pid == here) {
    std::lock_guard lock(old->mu);
    old->retired = true;
    old->cv.notify_all();
  }
  transport::keep_forever(old);
}

// The starter of this process and credentials, started on first use; null when it could not be had.
Starter* starter_here() noexcept {
  transport::Epoch here = transport::current_epoch();
  Starter* s = g_starter.load(std::memory_order_acquire);
  if (s == nullptr || !(s->epoch == here)) {
    auto* fresh = new (std::nothrow) Starter(here);
    if (fresh == nullptr) return nullptr;
    if (g_starter.compare_exchange_strong(s, fresh, std::memory_order_acq_rel)) {
      retire(s, here.pid);
      std::thread thread;
      {
        SignalsHeld quiet(signals_held_while_starting());
        thread = make_thread([fresh] { run_starter(fresh); });
      }
      bool running = thread.joinable();
      if (running) thread.detach();
      fresh->state.store(running ? Starter::kRunning : Starter::kFailed, std::memory_order_release);
      return running ? fresh : nullptr;
    }
    delete fresh;  // another thread of this process made it first: s is that one
  }
  while (s->state.load(std::memory_order_acquire) == Starter::kStarting) std::this_thread::yield();
  return s->state.load(std::memory_order_acquire) == Starter::kRunning ? s : nullptr;
}

}  // namespace

std::thread start_module_thread(std::function<void()> body) noexcept {
  for (;;) {
    Starter* s = starter_here();
    if (s == nullptr) {  // made here then, holding only what the kernel would not discard
      SignalsHeld quiet(signals_held_while_starting());
      return make_thread(std::move(body));
    }
    Starter::Job job{&body, std::thread(), false};
    std::unique_lock lock(s->mu);
    if (s->retired) continue;  // credentials changed since the look: the new epoch's starter
    try {
      s->jobs.push_back(&job);
    } catch (const std::bad_alloc&) {
      return std::thread();
    }
    s->cv.notify_all();
    s->cv.wait(lock, [&job] { return job.done; });
    return std::move(job.made);
  }
}

sigset_t signals_held_while_starting() noexcept {
  SavedErrno keep_errno;
  sigset_t held;
  sigfillset(&held);
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction action {};
    // glibc refuses its own internal signals (EINVAL): they stay blocked, as sigfillset leaves them.
    if (::sigaction(sig, nullptr, &action) != 0) continue;
    bool with_handler = (action.sa_flags & SA_SIGINFO) != 0;
    bool discarded = !with_handler && (action.sa_handler == SIG_IGN ||
                                       (action.sa_handler == SIG_DFL && ignored_by_default(sig)));
    if (discarded) sigdelset(&held, sig);
  }
  return held;
}

void block_all_signals() noexcept {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, nullptr);
}

}  // namespace tcp2rdma::preload
