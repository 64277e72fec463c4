// A poll or select call's spin before it sleeps (poll_spin.h).
#include "readiness/poll_spin.h"

#include <chrono>

#include "libc/real_calls.h"
#include "readiness/spin_budget.h"
#include "spin_pause.h"

namespace tcp2rdma::preload {
namespace {

struct ThreadSpin {
  int rule_us = -1;  // the last call's fixed rule (0: none or adaptive; -1: no call yet)
};

ThreadSpin& mine() {
  static thread_local ThreadSpin spin;
  return spin;
}

}  // namespace

bool PollSpin::expected() { return mine().rule_us != 0; }

void PollSpin::run(PolledStreams& polled, pollfd* kernel, size_t kernel_count, const transport::Deadline& deadline) {
  ThreadSpin& t = mine();
  bool yields = true, adaptive = true;
  int spin_us = polled.spin_rule(&adaptive, &yields);
  if (adaptive) spin_us = 0;
  t.rule_us = spin_us;
  if (!deadline.never_ends()) {
    timespec left = deadline.left_timespec();
    int64_t left_us = static_cast<int64_t>(left.tv_sec) * 1000000 + left.tv_nsec / 1000;
    if (left_us < spin_us) spin_us = static_cast<int>(left_us);  // never past the caller's timeout
  }
  if (spin_us < SpinBudget::kLeastUs) return;
  auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
  const unsigned look_every = transport::polls_per_look(yields);
  // Streams alone (their entries are -1 in `kernel`): nothing for the kernel to look at.
  bool kernel_asked = false;
  for (size_t i = 0; i < kernel_count; ++i) kernel_asked |= kernel[i].fd >= 0;
  polled.begin_spin();
  for (unsigned polls = 1;; ++polls) {
    polled.spin();
    if (polled.news()) break;
    if (polls % look_every == 0) {
      constexpr timespec kNow{0, 0};
      if (kernel_asked && real().ppoll(kernel, kernel_count, &kNow, nullptr) > 0) break;
      if (std::chrono::steady_clock::now() >= until) break;
    }
    transport::spin_pause(yields);
  }
  polled.end_spin();
}

}  // namespace tcp2rdma::preload
