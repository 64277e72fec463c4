// One connection's move from TCP onto an RDMA stream while the application goes on using the TCP
// connection (docs/architecture.md, "The byte-exact switch"). The session is what the application's
// calls and the thread that runs the switch share: the phase, and the counts of application bytes
// that went each way on TCP, which the switch freezes.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "rule_set.h"

namespace tcp2rdma::preload {

class TrackedSocket;

class UpgradeSession {
 public:
  enum class Phase : uint8_t {
    kOnTcp,      // the application's calls go to the kernel socket, never blocking inside the gate,
                 // and are counted; the RDMA connection is being set up beside it
    kSwitching,  // the counts are frozen and the switch owns the socket; the application's calls wait
    kOver,       // the socket has its stream, or stays TCP for good
  };

  UpgradeSession();
  ~UpgradeSession();
  UpgradeSession(const UpgradeSession&) = delete;
  UpgradeSession& operator=(const UpgradeSession&) = delete;

  Phase phase() const noexcept { return phase_.load(std::memory_order_acquire); }
  // Readable once the phase has left kOnTcp, and from then on: a poller that watches the socket
  // during kOnTcp watches this beside it, so that it looks again when the connection moves. Made by
  // the first caller (a poll(2) or a blocking call under way), so that a connection whose application
  // never sleeps on it during the upgrade (an epoll loop: its registrations move with the upgrade)
  // costs no descriptor; kept until the session ends. -1 when no descriptor can be had: the caller
  // then sleeps in short slices (kBlindSleepMs) and looks again.
  int wake_fd() const noexcept;
  static constexpr int kBlindSleepMs = 10;
  // The timeout (ms, -1: none) of a poll that `fd` is to end when something changes: `ms` itself, or
  // at most kBlindSleepMs when there is no such descriptor (-1), after which the caller looks again.
  static int poll_ms_for(int fd, int ms) noexcept {
    return fd >= 0 || (ms >= 0 && ms <= kBlindSleepMs) ? ms : kBlindSleepMs;
  }

  // The application's side. `io(sent, received)` makes one kernel call that does not block and adds
  // what it moved to the counts, with the gate held; false, with nothing done, once the phase is no
  // longer kOnTcp (the caller then waits for kOver and looks at the socket again).
  template <typename Io>
  bool run_on_tcp(Io&& io) {
    std::lock_guard lock(mu_);
    if (phase() != Phase::kOnTcp) return false;
    io(sent_, received_);
    return true;
  }
  // The application of a server shuts its sending side down while the connection is on TCP:
  // `shut()` makes the kernel call with the gate held, and the session remembers that this side's
  // TCP ended (its HELLO will say so, and no record follows). False, with nothing done, once the
  // phase is no longer kOnTcp.
  template <typename Shut>
  bool end_sending_on_tcp(Shut&& shut) {
    std::lock_guard lock(mu_);
    if (phase() != Phase::kOnTcp) return false;
    if (shut()) sending_ended_ = true;
    return true;
  }
  // An application call of this process routed to the session (route_of), or an epoll registration:
  // the process uses the connection. A server's request is answered once it does (or, outside a
  // pre-fork server, after a moment: upgrade/request_watch.cpp): the process that accepted may fork
  // the connection away unused.
  void note_used() noexcept {
    if (!used_.load(std::memory_order_relaxed)) used_.store(true, std::memory_order_release);
  }
  bool used() const noexcept { return used_.load(std::memory_order_acquire); }
  void wait_over();
  // The same, for `most` at most: whether the session is over.
  bool wait_over_for(std::chrono::microseconds most);
  // A server connection's upgrade in the background: the listener it was accepted from and its rule,
  // so that a fork can hand the upgrade to the process that uses the connection next (set by
  // upgrade_beside while its caller holds the listener, which the upgrade then holds until it is over).
  void set_origin(TrackedSocket* listener, const config::Decision& decision) noexcept;
  // The fork's settle (process/deferred_upgrade.h). A server session still on TCP with an origin ends
  // here as deferred (kDeferred): *listener (one more reference, the caller's) and *decision are what
  // the process that uses the connection next needs to take the upgrade up again. One without an
  // origin ends on TCP for good (kSettled, as settle() returning true); one that is switching is
  // waited for (kWasOver).
  enum class ForkSettle : uint8_t { kDeferred, kSettled, kWasOver };
  ForkSettle defer_for_fork(TrackedSocket** listener, config::Decision* decision);
  // Ended by defer_for_fork: the request of its client is not declined, it is the next user's.
  bool deferred() const noexcept { return deferred_.load(std::memory_order_acquire); }
  // A session that takes up a deferred one: its counts and ended sending side go on from there. The
  // old session is kept (threads that looked at it may still hold it) and freed with this one.
  void continue_from(UpgradeSession* old) noexcept;
  // A session that brings a connection back on TCP to RDMA (upgrade/return_to_rdma.h): its switch
  // counts the TCP bytes by the kernel's totals (kernel_tcp_counts.h), since the connection's earlier
  // bytes, its switch records and failover resends went on TCP without it. Set before it is used.
  void set_returning() noexcept { returning_ = true; }
  bool returning() const noexcept { return returning_; }
  // A descriptor of the socket is closed, or the process forks, execs or exits: a session still on
  // TCP ends there (the connection stays TCP: a child or a new program can go on using it; true, and
  // the caller writes the log line), one that is switching is waited for. Afterwards the phase is
  // kOver.
  bool settle();

  // The switch's side. kOnTcp -> kSwitching, the counts as they are now and whether this side's TCP
  // sending side ended; false when the session was settled first (the connection stays TCP, and
  // nothing may be written to it).
  bool freeze(uint64_t* sent, uint64_t* received, bool* sending_ended);
  // kOnTcp -> kOver: the upgrade failed before the switch and the connection stays TCP; false when
  // the session was settled first.
  bool end_on_tcp();
  // kSwitching -> kOver, and every waiter goes on.
  void finish();

  // The connection's log label (describe_connection), taken when the session starts: the log line of a
  // session that ends later may be written after its descriptor is gone.
  void set_label(const char* label);
  const char* label() const noexcept { return label_; }
  // The bytes moved on TCP before the freeze (for the log line), and whether this side's TCP sending
  // side ended.
  uint64_t sent() const;
  uint64_t received() const;
  bool sending_ended() const;
  // A session made to stand for the ended one of the program that exec'd this one (process/
  // exec_returns.h): its counts, before it is used.
  void adopt_counts(uint64_t sent, uint64_t received, bool sending_ended);

 private:
  void signal_locked();
  bool end_on_tcp_locked();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<Phase> phase_{Phase::kOnTcp};
  uint64_t sent_ = 0;
  uint64_t received_ = 0;
  bool sending_ended_ = false;
  mutable std::atomic<int> wake_fd_{-1};  // made under mu_, once
  char label_[256] = "";
  TrackedSocket* origin_listener_ = nullptr;
  config::Decision origin_decision_{};
  std::atomic<bool> deferred_{false};
  std::atomic<bool> used_{false};
  UpgradeSession* previous_ = nullptr;  // owned
  bool returning_ = false;
};

// Settles (UpgradeSession::settle) the session of every descriptor of this process: before fork and
// exec, whose child or new program will use the connection on TCP.
void settle_all_sessions() noexcept;
// Settles the session of fd's socket, if it has one under way: before fd is closed (or `why`, for
// the log: before it is passed to another process).
void settle_session(int fd, const char* why = nullptr) noexcept;

}  // namespace tcp2rdma::preload
