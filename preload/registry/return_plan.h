// When a connection that went back to TCP tries RDMA again (docs/architecture.md, "Back to RDMA").
// A connection that was on RDMA and is back on TCP (its path failed, or a move back) upgrades again in
// the background at a call of the process that uses it, once a backoff has passed: 1 s after the move,
// then twice as long after each attempt that failed (the path still down, the peer not ready), at
// most 64 s, as the refusal memory waits for a server (upgrade/refusals.h). A move whose cause is gone
// as soon as it is done (a change of credentials, a forked child that learns it holds the connection
// alone; at the peer, the mover's marker says so) makes the first attempt due at once: hurry(). The
// plan is what the application's calls look at: one load while none is due.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "rule_set.h"

namespace tcp2rdma::preload {

class ReturnPlan {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kFirstWait{1000};
  static constexpr std::chrono::milliseconds kLongestWait{64000};

  // The rule the connection's upgrade went by, kept from its switch for its returns.
  void remember(const config::Decision& decision) noexcept { decision_ = decision; }
  bool remembered() const noexcept { return decision_.options != nullptr; }
  // The connection went back to TCP: an attempt is due kFirstWait from `now`, by the remembered rule.
  // Its epoll registrations are kept for the attempt from now on (armed()).
  void arm(Clock::time_point now) noexcept {
    prompt_.store(false, std::memory_order_relaxed);
    wait_ms_.store(static_cast<uint32_t>(kFirstWait.count()), std::memory_order_relaxed);
    armed_.store(true, std::memory_order_release);
    due_ns_.store(ns(now + kFirstWait), std::memory_order_release);
  }
  // At most this many prompt attempts a connection in kPromptWindow: a process that changes its
  // credentials around each request (seteuid back and forth) would otherwise move back and return at
  // every one; past them its returns wait kFirstWait as any.
  static constexpr uint32_t kPromptsAWindow = 3;
  static constexpr std::chrono::milliseconds kPromptWindow{10000};
  // The cause of the move is gone already: the next attempt is due at once, and is a prompt one
  // (take_due); one that fails plans the next kFirstWait later, as after arm(). Nothing when no return
  // is planned, or when the connection had its prompt attempts of the window already.
  void hurry(Clock::time_point now) noexcept {
    if (!armed() || !prompt_allowed(now)) return;
    wait_ms_.store(static_cast<uint32_t>(kFirstWait.count() / 2), std::memory_order_relaxed);
    prompt_.store(true, std::memory_order_relaxed);
    due_ns_.store(ns(now), std::memory_order_release);
  }
  // Whether the connection may still go back to RDMA (an attempt due, or under way).
  bool armed() const noexcept { return armed_.load(std::memory_order_acquire); }
  // The one caller that finds an attempt due at `now` gets true (and the rule in *decision, and in
  // *prompt whether hurry() made it due); the attempt is then under way until failed() or done().
  bool take_due(Clock::time_point now, config::Decision* decision, bool* prompt = nullptr) noexcept {
    int64_t due = due_ns_.load(std::memory_order_acquire);
    if (due == 0 || due > ns(now)) return false;
    if (!due_ns_.compare_exchange_strong(due, 0, std::memory_order_acq_rel)) return false;
    *decision = decision_;
    bool hurried = prompt_.exchange(false, std::memory_order_relaxed);
    if (prompt != nullptr) *prompt = hurried;
    return true;
  }
  // The attempt came to nothing, or could not start yet: the next after the current wait, doubled
  // (`double_wait`) up to kLongestWait.
  void failed(Clock::time_point now, bool double_wait = true) noexcept {
    uint32_t wait = wait_ms_.load(std::memory_order_relaxed);
    if (double_wait) wait = static_cast<uint32_t>(std::min<int64_t>(2 * int64_t{wait}, kLongestWait.count()));
    wait_ms_.store(wait, std::memory_order_relaxed);
    due_ns_.store(ns(now + std::chrono::milliseconds(wait)), std::memory_order_release);
  }
  // The milliseconds until the next attempt, after failed() (for the log line).
  uint32_t wait_ms() const noexcept { return wait_ms_.load(std::memory_order_relaxed); }
  // Back on RDMA, or never again (the connection is shared with another process, its TCP ended): no
  // attempt is due.
  void done() noexcept {
    due_ns_.store(0, std::memory_order_release);
    armed_.store(false, std::memory_order_release);
  }

 private:
  bool prompt_allowed(Clock::time_point now) noexcept {
    int64_t since = window_ns_.load(std::memory_order_relaxed);
    if (since == 0 || ns(now) - since >= std::chrono::nanoseconds(kPromptWindow).count()) {
      window_ns_.store(ns(now), std::memory_order_relaxed);
      prompts_.store(0, std::memory_order_relaxed);
    }
    return prompts_.fetch_add(1, std::memory_order_relaxed) < kPromptsAWindow;
  }
  static int64_t ns(Clock::time_point t) noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  }
  std::atomic<int64_t> due_ns_{0};  // 0: none due
  std::atomic<uint32_t> wait_ms_{0};
  std::atomic<bool> armed_{false};
  std::atomic<bool> prompt_{false};  // the attempt due is hurry()'s
  std::atomic<int64_t> window_ns_{0};  // when the window of prompt attempts began
  std::atomic<uint32_t> prompts_{0};   // hurries in it
  config::Decision decision_{};  // written before due_ns_ (release), read after it (acquire)
};

}  // namespace tcp2rdma::preload
