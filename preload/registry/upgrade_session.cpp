#include "registry/upgrade_session.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdio>

#include "libc/real_calls.h"
#include "own_descriptors.h"
#include "registry/fd_table.h"
#include "registry/tracked_socket.h"
#include "stats/stats_writer.h"
#include "util/log.h"

namespace tcp2rdma::preload {

UpgradeSession::UpgradeSession() = default;

UpgradeSession::~UpgradeSession() {
  int fd = wake_fd_.load(std::memory_order_acquire);
  if (fd >= 0) real().close(fd);
  delete previous_;
}

void UpgradeSession::set_origin(TrackedSocket* listener, const config::Decision& decision) noexcept {
  std::lock_guard lock(mu_);
  origin_listener_ = listener;
  origin_decision_ = decision;
}

UpgradeSession::ForkSettle UpgradeSession::defer_for_fork(TrackedSocket** listener, config::Decision* decision) {
  std::unique_lock lock(mu_);
  if (phase() == Phase::kOnTcp && origin_listener_ != nullptr) {
    // Still held by the upgrade's Connection while the phase is kOnTcp: the reference is taken
    // before the phase changes, so the upgrade cannot let go of the last one first.
    origin_listener_->add_ref();
    *listener = origin_listener_;
    *decision = origin_decision_;
    deferred_.store(true, std::memory_order_release);
    end_on_tcp_locked();
    return ForkSettle::kDeferred;
  }
  if (end_on_tcp_locked()) return ForkSettle::kSettled;
  cv_.wait(lock, [&] { return phase() == Phase::kOver; });
  return ForkSettle::kWasOver;
}

void UpgradeSession::continue_from(UpgradeSession* old) noexcept {
  // Not under the old one's lock: in a forked child it may be held for ever by a thread of the parent
  // (one whose call found the phase over). Its counts stopped at kOver, which the acquire below sees.
  if (old->phase() == Phase::kOver) {
    std::lock_guard ours(mu_);
    sent_ = old->sent_;
    received_ = old->received_;
    sending_ended_ = old->sending_ended_;
  }
  previous_ = old;
}

// The wake fd is one of the module's own descriptors: above the application's limit
// (own_descriptors.h). A poller holds the session (its route) for as long as it polls the fd, and the
// fd lives as long as the session: its number is never another descriptor's while polled.
int UpgradeSession::wake_fd() const noexcept {
  int fd = wake_fd_.load(std::memory_order_acquire);
  if (fd >= 0) return fd;
  std::lock_guard lock(mu_);
  fd = wake_fd_.load(std::memory_order_relaxed);
  if (fd >= 0) return fd;
  transport::OwnDescriptors window;
  fd = window.place(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  // Made after the phase left kOnTcp: readable at once, as it would have been made readable then.
  if (fd >= 0 && phase() != Phase::kOnTcp) (void)eventfd_write(fd, 1);
  wake_fd_.store(fd, std::memory_order_release);
  return fd;
}

void UpgradeSession::signal_locked() {
  // Written once and never read: it stays readable for every later poll.
  // eventfd_write is libc's own, never our write() wrapper.
  int fd = wake_fd_.load(std::memory_order_relaxed);
  if (fd >= 0) (void)eventfd_write(fd, 1);
  cv_.notify_all();
}

void UpgradeSession::wait_over() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return phase() == Phase::kOver; });
}

bool UpgradeSession::wait_over_for(std::chrono::microseconds most) {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, most, [&] { return phase() == Phase::kOver; });
}

bool UpgradeSession::end_on_tcp_locked() {
  if (phase() != Phase::kOnTcp) return false;
  phase_.store(Phase::kOver, std::memory_order_release);
  signal_locked();
  return true;
}

bool UpgradeSession::settle() {
  std::unique_lock lock(mu_);
  if (end_on_tcp_locked()) return true;
  cv_.wait(lock, [&] { return phase() == Phase::kOver; });
  return false;
}

bool UpgradeSession::end_on_tcp() {
  std::lock_guard lock(mu_);
  return end_on_tcp_locked();
}

void UpgradeSession::set_label(const char* label) { snprintf(label_, sizeof label_, "%s", label); }

bool UpgradeSession::freeze(uint64_t* sent, uint64_t* received, bool* sending_ended) {
  std::lock_guard lock(mu_);
  if (phase() != Phase::kOnTcp) return false;
  phase_.store(Phase::kSwitching, std::memory_order_release);
  *sent = sent_;
  *received = received_;
  *sending_ended = sending_ended_;
  signal_locked();
  return true;
}

void UpgradeSession::finish() {
  std::lock_guard lock(mu_);
  phase_.store(Phase::kOver, std::memory_order_release);
  signal_locked();
}

uint64_t UpgradeSession::sent() const {
  std::lock_guard lock(mu_);
  return sent_;
}

uint64_t UpgradeSession::received() const {
  std::lock_guard lock(mu_);
  return received_;
}

bool UpgradeSession::sending_ended() const {
  std::lock_guard lock(mu_);
  return sending_ended_;
}

void UpgradeSession::adopt_counts(uint64_t sent, uint64_t received, bool sending_ended) {
  std::lock_guard lock(mu_);
  sent_ = sent;
  received_ = received;
  sending_ended_ = sending_ended;
}

void settle_session(int fd, const char* why) noexcept {
  SocketHold socket = SocketHold::of(fd);
  if (!socket) return;
  if (UpgradeSession* session = socket->active_session(); session != nullptr && session->settle()) {
    if (why == nullptr) why = "closed, or the process forked, ran another program or exited, before the upgrade";
    log_line("%s: stays tcp (%s)", session->label(), why);
    stats::slot_on_tcp(socket->stats_slot.load(std::memory_order_relaxed), stats::TcpReason::kClosedEarly, why);
  }
}

void settle_all_sessions() noexcept {
  for_each_tracked_fd([](int fd, SocketHold&) { settle_session(fd); });
}

}  // namespace tcp2rdma::preload
