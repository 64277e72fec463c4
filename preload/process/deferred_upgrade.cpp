#include "process/deferred_upgrade.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <utility>
#include <vector>

#include "back_to_tcp/move_back.h"
#include "keep_forever.h"
#include "libc/real_calls.h"
#include "listener/prefork_listeners.h"
#include "process/exec_returns.h"
#include "process/fork_service.h"
#include "registry/connection_path.h"
#include "registry/connection_stats.h"
#include "registry/fd_table.h"
#include "registry/socket_registry.h"
#include "registry/tracked_socket.h"
#include "registry/upgrade_session.h"
#include "stats/stats_writer.h"
#include "upgrade/background.h"
#include "util/log.h"

namespace tcp2rdma::preload {
namespace {

// One take-up at a time in a process. A thread that finds a record waits here while another takes the
// connection up, and so never reaches the kernel socket before the new session counts its bytes. Rare
// (once per connection a fork interrupted), so one lock for all. The fork wrapper holds it from
// before it closes the fork gate (a take-up waits for the gate under it: always this lock first)
// until the real fork is done; the child gets a lock of its own.
std::mutex*& take_up_lock_slot() {
  static auto* lock = new std::mutex;
  return lock;
}

}  // namespace

std::mutex& take_up_lock() noexcept { return *take_up_lock_slot(); }

void log_stays(TrackedSocket* socket, const char* why) noexcept {
  log_line("%s: stays tcp (%s)", connection_label(socket), why);
  stats::slot_on_tcp(socket->stats_slot.load(std::memory_order_relaxed), stats::TcpReason::kClosedEarly, why);
}

namespace {

// Why the parent takes an upgrade up that no process used (the log line's end).
constexpr char kUnusedNote[] = " (no process used it within 200 ms of the fork)";
static_assert(kUnusedTakeUpAfter == std::chrono::milliseconds(200), "kUnusedNote says 200 ms");

// The record's upgrade, taken up in this process: a child first gets an RDMA listener of its own
// (the parent holds the listener's port and sends the client's request on). `note` ends the log line.
void resume(TrackedSocket* socket, int fd, const TrackedSocket::DeferredUpgrade& record, bool child,
            const char* note = "") {
  if (child) {
    stats_taken_over(socket, fd, config::Role::kServer, record.decision);  // `tcp2rdma stat` of this process
    claim_rdma_listener(fd, record.listener);
    // The parent let go, and gives the upgrade to one child only: the connection is this process's
    // alone, and after a fall back to TCP it returns here, through the same listener's directory.
    socket->forks.note_alone();
    socket->forks.keep_return_listener(record.listener);
  }
  log_line("%s: the upgrade a fork interrupted goes on in this process%s", connection_label(socket),
           child ? " (its parent let go of the connection)" : note);
  upgrade_beside(fd, config::Role::kServer, record.listener, record.decision, SessionStart::kResumed);
}

// A child's answer about a deferred connection, applied.
void apply_answer(TrackedSocket* socket, int fd, const TrackedSocket::DeferredUpgrade& record, HandBack& answer,
                  bool may_resume) {
  switch (answer.outcome) {
    case HandBack::Outcome::kResume:
      if (may_resume) {
        resume(socket, fd, record, /*child=*/true);
      } else {
        log_stays(socket, "the process forks or runs another program before it used the connection");
      }
      return;
    case HandBack::Outcome::kStaysTcp:
      log_stays(socket, "the parent process holds the connection too");
      return;
    case HandBack::Outcome::kMoved:
      // The parent took the upgrade up and reached RDMA before this claim, then moved back for us.
      if (keep_answer_prefix(answer, &socket->prefix)) {
        if (answer.alone && may_resume) {
          // The parent let go of it since: it is this process's, and may go back to RDMA here.
          socket->forks.note_alone();
          socket->forks.keep_return_listener(record.listener);
          socket->returns.remember(record.decision);
          auto now = std::chrono::steady_clock::now();
          socket->returns.arm(now);
          socket->returns.hurry(now);  // this process is its user now: its side of the return at once
        }
        socket->move_path(Path::kTcp, Path::kBackOnTcp);
        if (answer.write_shut) real().shutdown(fd, SHUT_WR);
        log_line("%s: back on tcp from the parent at this process's first use (%zu bytes of the peer's to read first)",
                 connection_label(socket), socket->prefix.size());
        return;
      }
      break;
    case HandBack::Outcome::kFailed:
    case HandBack::Outcome::kParents:
    case HandBack::Outcome::kGone:
    case HandBack::Outcome::kRelayed: break;  // a deferred upgrade's claim is whole: never relayed
  }
  refuse_parents_copy(socket, fd, answer.outcome);  // never a connection with bytes missing
}

// Ends `session`, still on TCP, as deferred, with a record on `socket` that a child's claim or this
// process's next use takes up (lent since `lent_at`). The record is installed before the session
// ends: a thread that finds the session over finds the record too, and waits for the take-up lock
// instead of reaching the kernel socket uncounted. Without memory for it the session only settles;
// a session past TCP (switching, or over) leaves no record.
UpgradeSession::ForkSettle defer_with_record(TrackedSocket* socket, UpgradeSession* session,
                                             std::chrono::steady_clock::time_point lent_at) {
  auto* record = new (std::nothrow) TrackedSocket::DeferredUpgrade;
  if (record == nullptr) {
    return session->settle() ? UpgradeSession::ForkSettle::kSettled : UpgradeSession::ForkSettle::kWasOver;
  }
  record->generation = fork_generation();
  record->lent_at = lent_at;
  socket->defer_upgrade(std::unique_ptr<TrackedSocket::DeferredUpgrade>(record));
  TrackedSocket* listener = nullptr;
  config::Decision decision{};
  UpgradeSession::ForkSettle settled = session->defer_for_fork(&listener, &decision);
  if (settled == UpgradeSession::ForkSettle::kDeferred) {
    record->listener = listener;
    record->decision = decision;
  } else {
    (void)socket->take_deferred_upgrade();  // nothing to take up
  }
  return settled;
}

}  // namespace

void defer_sessions_for_fork() noexcept {
  auto now = std::chrono::steady_clock::now();
  for_each_tracked_fd([now](int, SocketHold& socket) {
    if (const TrackedSocket::DeferredUpgrade* earlier = socket->deferred_upgrade()) {
      // Deferred at an earlier fork and not taken up yet: this fork's child gets its own while to use it.
      if (earlier->generation == fork_generation()) earlier->lent_at = now;
      return;
    }
    UpgradeSession* session = socket->active_session();
    if (session == nullptr) return;
    UpgradeSession::ForkSettle settled = defer_with_record(socket.get(), session, now);
    if (settled == UpgradeSession::ForkSettle::kDeferred) {
      log_line("%s: the process forks while the upgrade is on tcp: the process that uses the connection next "
               "takes it up",
               session->label());
      return;
    }
    if (settled == UpgradeSession::ForkSettle::kSettled) {
      log_line("%s: stays tcp (the process forked before the upgrade)", session->label());
      stats::slot_on_tcp(socket->stats_slot.load(std::memory_order_relaxed), stats::TcpReason::kClosedEarly,
                         "the process forked before the upgrade");
    }
  });
}

void drop_deferred_upgrades() noexcept {
  for_each_tracked_fd([](int, SocketHold& socket) {
    if (auto record = socket->take_deferred_upgrade()) {
      log_stays(socket.get(), "the process forked before the upgrade, and no channel to the child could be had");
      record->listener->release();
    }
  });
}

void drop_inherited_deferred_upgrades(bool (*lent_here)(uint64_t serial)) noexcept {
  for_each_tracked_fd([lent_here](int, SocketHold& socket) {
    if (!socket->has_deferred_upgrade() || lent_here(socket->serial())) return;
    if (auto record = socket->take_deferred_upgrade()) record->listener->release();
  });
}

namespace {

// An upgrade handed on at exec stays on the socket, as this process's own given it at exec, until the
// exec succeeds: a failed one (a shell tries each PATH directory) hands it on again, or this process
// takes it up itself at its first use.
void keep_for_exec(TrackedSocket* socket) {
  std::unique_ptr<DeferredUpgrade> record = socket->take_deferred_upgrade();
  record->generation = fork_generation();
  record->handed_at_exec = true;
  record->handed_on = true;
  socket->defer_upgrade(std::move(record));
}

// take_up_deferred_upgrade under the lock. The record stays on the socket (other threads wait for
// the lock) until the new session is in place.
void take_up_locked(TrackedSocket* socket, int fd, bool may_resume, const char* note = "",
                    ReturnHandOn* hand_on = nullptr) {
  const TrackedSocket::DeferredUpgrade* record = socket->deferred_upgrade();
  if (record == nullptr) return;  // another thread took it up first
  bool child = record->generation != fork_generation();
  if (!child && may_resume) {
    // One the program that exec'd this one was given: taken up as a forked child's (its own listener).
    resume(socket, fd, *record, /*child=*/record->handed_at_exec, note);
  } else {
    // A child asks its parent; at exec, one the parent gives it, or one given to this program, goes on.
    HandBack answer = child ? claim_deferred_from_parent(socket->serial()) : HandBack{};
    bool ours = child ? answer.outcome == HandBack::Outcome::kResume : record->handed_at_exec;
    if (hand_on != nullptr && ours && hand_on->add_upgrade(socket)) return keep_for_exec(socket);
    if (!child) return;  // this process's own: it stays for its first use
    apply_answer(socket, fd, *record, answer, may_resume);
  }
  if (auto owned = socket->take_deferred_upgrade()) owned->listener->release();
}

}  // namespace

void take_up_deferred_upgrade(TrackedSocket* socket, int fd, bool may_resume) noexcept {
  std::lock_guard lock(take_up_lock());
  take_up_locked(socket, fd, may_resume);
}

std::chrono::steady_clock::time_point take_up_unused_deferred_upgrades() noexcept {
  using Clock = std::chrono::steady_clock;
  auto next = Clock::time_point::max();
  std::vector<std::pair<int, SocketHold>> waiting;
  try {
    for_each_tracked_fd([&](int fd, SocketHold& socket) {
      const TrackedSocket::DeferredUpgrade* record = socket->deferred_upgrade();
      if (record != nullptr && record->generation == fork_generation()) waiting.emplace_back(fd, std::move(socket));
    });
  } catch (const std::bad_alloc&) {
    return Clock::now() + kUnusedTakeUpAfter;  // another look later
  }
  for (auto& [fd, socket] : waiting) {
    std::lock_guard lock(take_up_lock());
    // The number is freed under this lock (hold_take_ups_while_freeing): still the socket's, it stays so.
    const TrackedSocket::DeferredUpgrade* record = socket->deferred_upgrade();
    if (record == nullptr || fd_table().find(fd) != socket.get()) continue;
    if (auto due = record->lent_at + kUnusedTakeUpAfter; due > Clock::now()) {
      next = std::min(next, due);  // lent again at a later fork
      continue;
    }
    take_up_locked(socket.get(), fd, /*may_resume=*/true, kUnusedNote);
    // This process takes it as its user: its request is answered now, as after a call of the
    // application's (a family's listener holds a request until the connection is used).
    if (UpgradeSession* session = socket->active_session()) session->note_used();
  }
  return next;
}

namespace {

// An upgrade this process took up after a fork deferred it, still on TCP, on a connection a child
// holds too (is_lent): the one kind of session a close may hand to the child instead of ending.
bool taken_up_while_lent(TrackedSocket* socket) {
  return socket->serial() != 0 && !socket->has_deferred_upgrade() && socket->active_session() != nullptr &&
         is_lent(socket->serial());
}

}  // namespace

std::unique_lock<std::mutex> hold_take_ups_while_freeing(int first, int last) noexcept {
  bool deferred = false;
  for_each_tracked_fd(
      [&](int, SocketHold& socket) {
        deferred = deferred || socket->has_deferred_upgrade() || taken_up_while_lent(socket.get());
      },
      first, last);
  return deferred ? std::unique_lock(take_up_lock()) : std::unique_lock<std::mutex>();
}

void settle_for_freeing(int fd) noexcept {
  SocketHold socket = SocketHold::of(fd);
  if (socket && taken_up_while_lent(socket.get())) {
    // No process had used the connection within kUnusedTakeUpAfter of the fork, so this one took the
    // upgrade up; now it lets go while a child still holds the connection: the child is its user
    // (socat's and inetd's worker exec the service later than that on a loaded machine). The session
    // ends deferred again, the client's request neither answered nor declined, and the child's claim
    // is answered kResume when the last descriptor goes (~TrackedSocket), not kStaysTcp.
    UpgradeSession* session = socket->active_session();
    switch (defer_with_record(socket.get(), session, std::chrono::steady_clock::now())) {
      case UpgradeSession::ForkSettle::kDeferred:
        log_line("%s: this process lets go while a child holds the connection: the upgrade waits for the child's "
                 "use",
                 session->label());
        return;
      case UpgradeSession::ForkSettle::kSettled: log_stays(socket.get(), "closed before the upgrade"); return;
      case UpgradeSession::ForkSettle::kWasOver: return;
    }
  }
  settle_session(fd);
}

void hold_take_ups_for_fork() noexcept { take_up_lock().lock(); }

void release_take_ups_after_fork(bool child) noexcept {
  if (child) {
    transport::keep_forever(std::exchange(take_up_lock_slot(), new std::mutex));  // the parent's thread's
  } else {
    take_up_lock().unlock();
  }
}

void give_up_deferred_upgrade(TrackedSocket* socket, int fd, const char* why) noexcept {
  if (!socket->has_deferred_upgrade()) return;
  std::lock_guard lock(take_up_lock());
  const TrackedSocket::DeferredUpgrade* record = socket->deferred_upgrade();
  if (record == nullptr) return;  // taken up meanwhile: the caller settles its session
  if (record->generation != fork_generation()) {
    take_up_locked(socket, fd, /*may_resume=*/false);  // the parent's answer: it stays TCP here
    return;
  }
  if (auto owned = socket->take_deferred_upgrade()) {
    log_stays(socket, why);
    owned->listener->release();
  }
}

void claim_inherited_deferred_upgrades(bool (*survives)(const TrackedSocket*), bool lock_held,
                                       ReturnHandOn* hand_on) noexcept {
  for_each_tracked_fd([=](int fd, SocketHold& socket) {
    const TrackedSocket::DeferredUpgrade* record = socket->deferred_upgrade();
    bool own = record != nullptr && record->generation == fork_generation() && !(hand_on && record->handed_at_exec);
    if (record == nullptr || own || (survives != nullptr && !survives(socket.get()))) return;
    std::unique_lock<std::mutex> lock;
    if (!lock_held) lock = std::unique_lock(take_up_lock());
    take_up_locked(socket.get(), fd, /*may_resume=*/false, "", hand_on);
  });
}

}  // namespace tcp2rdma::preload
