#include "link_setup.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>

#include "channel_readiness.h"
#include "os_calls.h"

namespace tcp2rdma::transport {

int LinkSetup::take_free_slot() {
  for (uint32_t s = 0; s < kSetupSlots; ++s) {
    if (!(taken_ & (uint64_t{1} << s))) {
      taken_ |= uint64_t{1} << s;
      return static_cast<int>(s);
    }
  }
  return -1;
}

void LinkSetup::give_back(uint32_t slot) {
  awaiting_[slot] = Slot{};
  taken_ &= ~(uint64_t{1} << slot);
}

std::optional<LinkSetup::Awaiting> LinkSetup::waiting_in(uint32_t slot) const {
  if (slot >= kSetupSlots || !awaiting_[slot].used) return std::nullopt;
  return awaiting_[slot].open;
}

void LinkSetup::forget_stream(uint32_t slot, const RdmaStream* stream) {
  if (slot < kSetupSlots && awaiting_[slot].open.stream == stream) awaiting_[slot].open.stream = nullptr;
}

Status LinkSetup::keep_open(uint32_t slot) {
  // At most one open a slot is outstanding: more would be more than the receives kept for them.
  if (!serves_ || slot >= kSetupSlots || opens_.size() >= kSetupSlots) return Status::kProtocolError;
  Open open{slot, {}};
  std::memcpy(&open.request, own_slot(slot), sizeof open.request);
  opens_.push_back(open);
  // The listener's engine may sleep: it answers the open once it sees it. eventfd_write is libc's
  // own call, never the module's wrapper (own_calls.h).
  if (bell_ >= 0) {
    (void)eventfd_write(bell_, 1);
    if (rung_ != nullptr) rung_->store(true, std::memory_order_release);  // after the write (take_link_opens)
  }
  return Status::kOk;
}

void LinkSetup::set_bell(int bell, std::atomic<bool>* rung, int wake_set, int completion_fd, SetCounts* counts) {
  bell_ = bell;
  rung_ = rung;
  wake_set_ = wake_set;
  completion_fd_ = completion_fd;
  counts_ = counts;
  listening_pid_ = getpid();
  if (wake_set_ >= 0) join_set();  // the link is new: no event loop watches it yet
}

void LinkSetup::join_set() {
  in_set_ = watch_readable(wake_set_, completion_fd_);
  if (!in_set_) counts_->unseen.fetch_add(1, std::memory_order_relaxed);
}

void LinkSetup::leave_set() {
  if (in_set_) {
    os().epoll_ctl(wake_set_, EPOLL_CTL_DEL, completion_fd_, nullptr);
  } else {
    counts_->unseen.fetch_sub(1, std::memory_order_relaxed);
  }
  in_set_ = false;
}

void LinkSetup::forget_listener() {
  // A forked child's copy of the listener leaves the set (the parent's too) alone.
  if (wake_set_ >= 0 && getpid() == listening_pid_) {
    if (pollers_ == 0) leave_set();
    if (pollers_ > 0) counts_->left_to_loops.fetch_sub(1, std::memory_order_relaxed);
  }
  bell_ = -1;
  rung_ = nullptr;
  counts_ = nullptr;
  wake_set_ = -1;
}

void LinkSetup::pollers_join(int change) {
  int before = pollers_;
  pollers_ += change;
  // The set is shared with a forked child (one kernel object): only the listener's process changes it.
  if (wake_set_ < 0 || getpid() != listening_pid_) return;
  if (before == 0 && pollers_ > 0) {
    leave_set();
    counts_->left_to_loops.fetch_add(1, std::memory_order_relaxed);
  } else if (before > 0 && pollers_ == 0) {
    counts_->left_to_loops.fetch_sub(1, std::memory_order_relaxed);
    join_set();  // without memory for the entry, the listener finds this link's opens at timed looks
  }
}

}  // namespace tcp2rdma::transport
