// A channel's own thread with its link (link_progress.h): the completions it takes for itself, the
// link's events it takes for its looks, and the one place a blocked call waits for the link's news.
// Everything here runs with the link's lock held (a wait lets go of it while it sleeps or yields).
#include <cerrno>
#include <chrono>

#include "link_progress.h"
#include "rdma_stream.h"
#include "spin_pause.h"
#include "stream_link.h"

namespace tcp2rdma::transport {

Status LinkProgress::hand_out(StreamLink& link, RdmaStream& caller) {
  // Connection events are not taken here (take_events): that would cost a system call a message. A
  // side that only busy-polls still learns of a dead peer: its sends fail, and its busy polling is
  // bounded, after which it sleeps and takes them.
  ibv_wc wcs[16];
  int n = 0;
  while ((n = link.poll(wcs, 16)) > 0) {
    // Every completion taken off the queue is handed on, even after one fails the caller: the rest of
    // the batch is other channels' (or the link's: an open), and would be lost otherwise.
    Status mine = Status::kOk;
    for (int i = 0; i < n; ++i) {
      if (Status s = dispatch(link, wcs[i], &caller); s != Status::kOk && mine == Status::kOk) mine = s;
    }
    if (mine != Status::kOk) {
      caller.fail(mine);
      serve_touched(link, &caller);
      return mine;
    }
  }
  if (n < 0) {
    fail(link, "the completion queue", "failed", Status::kReset);
    return caller.failure_;
  }
  serve_touched(link, &caller);
  return Status::kOk;
}

void LinkProgress::take_cm_events(StreamLink& link, RdmaStream& caller) {
  if (!take_cm_news(link)) return;
  serve_touched(link, &caller);
  if (caller.polled_) caller.wake_pollers();
}

void LinkProgress::take_events(StreamLink& link, RdmaStream& caller, bool only_fired) {
  // Connection events are looked at here, after a sleep and in a look at readiness, not on every
  // progress. (A link whose connection events are not its own yet was not slept on for them: they
  // are taken whether or not anything fired.)
  if (!only_fired || !link.cm_watched() || link.take_cm_fired()) take_cm_events(link, caller);
  // The kicks are taken either way (take_channel_events): a kick's flag costs no call.
  if (only_fired && !link.take_completions_fired()) {
    link.take_kicks();
    return;
  }
  if (!link.take_channel_events()) return;
  // The event is taken and the queue no longer armed, yet the pollers of every channel of the link
  // sleep on that event, each having armed the queue before it slept: whoever takes the event arms
  // the queue again before letting go of the lock, after taking what is in it (to its channels,
  // which are told), so that the next completion raises an event again.
  arm_and_hand_out(link, &caller);
  serve_touched(link, &caller);
  // A thread asleep on the link may have been waiting for exactly a completion's event; the threads
  // waiting for its news may look now.
  if (link.sleeper_) {
    link.kick();
    link.cv().notify_all();
  }
}

Status LinkProgress::arm(StreamLink& link, RdmaStream& caller, bool* news) {
  // Arm the completion channel, then look once more: a completion that came in between would
  // otherwise raise no event.
  ibv_wc wc;
  if (Status s = link.arm_and_poll(&wc, news); s != Status::kOk) return s;
  if (!*news) return Status::kOk;
  Status s = dispatch(link, wc, &caller);
  serve_touched(link, &caller);
  return s;
}

LinkProgress::WaitEnd LinkProgress::wait_for_sleeper(StreamLink& link, std::unique_lock<std::mutex>& lock,
                                                     int cv_ms) {
  if (cv_ms >= 0) {
    link.cv().wait_for(lock, std::chrono::milliseconds(cv_ms));
  } else {
    link.cv().wait(lock);
  }
  return WaitEnd{};
}

std::optional<LinkProgress::WaitEnd> LinkProgress::spin_for(StreamLink& link, RdmaStream& caller,
                                                            std::unique_lock<std::mutex>& lock, int spin_us,
                                                            uint64_t seen) {
  // Bounded busy polling: a reply that comes within microseconds costs no sleep and no interrupt. One
  // thread a link spins (the others wait for its news), and it lets go of the link's lock between
  // polls: the link's other channels, and the listener that answers opens, must get in meanwhile.
  if (spin_us <= 0 || link.spinning_) return std::nullopt;
  link.spinning_ = true;
  auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
  const bool yield = link.spin_yields();
  // Reading the clock can be a system call (no vDSO clock in some guests): not on every poll. A poll
  // without a yield takes a fraction of a microsecond.
  const unsigned clock_every = yield ? 32 : 256;
  for (unsigned polls = 1;; ++polls) {
    ibv_wc wc;
    int n = link.poll(&wc, 1);
    if (n != 0) {
      link.spinning_ = false;
      if (n < 0) return WaitEnd{Woke::kFailed, Status::kReset};
      Status s = dispatch(link, wc, &caller);
      if (s != Status::kOk) caller.fail(s);
      serve_touched(link, &caller);
      return s == Status::kOk ? WaitEnd{} : WaitEnd{Woke::kFailed, s};
    }
    // On a software device (rxe) the adapter's own work needs the CPU we would spin on: it is given
    // away between polls (spin_pause.h). Measured (docs/benchmarks.md): without yielding, a long spin
    // halves throughput there; with it, a 1 ms spin costs nothing and saves sleeps.
    lock.unlock();
    spin_pause(yield);
    lock.lock();
    // Another thread may have taken our news meanwhile: the caller looks again.
    if (caller.failed() || caller.touched_ || link.dispatched_ != seen) break;
    if (polls % clock_every == 0 && std::chrono::steady_clock::now() >= until) break;
  }
  link.spinning_ = false;
  if (caller.failed()) return WaitEnd{Woke::kFailed, caller.failure_};
  if (caller.touched_) return WaitEnd{Woke::kTouched};
  if (link.dispatched_ != seen) return WaitEnd{};
  return std::nullopt;
}

LinkProgress::WaitEnd LinkProgress::wait(StreamLink& link, RdmaStream& caller, std::unique_lock<std::mutex>& lock,
                                         int spin_us, int sleep_ms, int cv_ms) {
  // The caller judged its state just now, under the lock: from here on, a completion another thread
  // hands out may be what it waits for (StreamLink::dispatched_).
  const uint64_t seen = link.dispatched_;
  // Another thread sleeps on the link and will wake everyone after its progress.
  if (link.sleeper_) return wait_for_sleeper(link, lock, cv_ms);
  if (auto end = spin_for(link, caller, lock, spin_us, seen)) return *end;
  // Another thread became the link's sleeper while we spun without the lock. A second sleeper in the
  // kernel would never be woken: the link's events wake one thread, which takes them and tells the
  // others through the condition, where we must be (a writer slept through the room its own reader's
  // thread took: epoll_echo's client, 64 KiB rings).
  if (link.sleeper_) return wait_for_sleeper(link, lock, cv_ms);
  bool news = false;
  if (Status s = arm(link, caller, &news); s != Status::kOk) {
    caller.fail(s);
    return WaitEnd{Woke::kFailed, s};
  }
  if (news) return WaitEnd{};
  link.sleeper_ = true;
  lock.unlock();
  int ready = link.sleep(sleep_ms);
  bool interrupted = ready < 0 && errno == EINTR;
  lock.lock();
  link.sleeper_ = false;
  take_events(link, caller);
  link.cv().notify_all();
  if (ready > 0) return WaitEnd{Woke::kEvent};
  if (interrupted) return WaitEnd{Woke::kInterrupted};
  return ready == 0 ? WaitEnd{Woke::kQuiet} : WaitEnd{};
}

}  // namespace tcp2rdma::transport
