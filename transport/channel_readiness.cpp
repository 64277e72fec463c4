// A channel's pollable descriptor (channel_readiness.h).
#include "channel_readiness.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>

#include "os_calls.h"
#include "own_descriptors.h"

namespace tcp2rdma::transport {

bool watch_readable(int set, int fd) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  return os().epoll_ctl(set, EPOLL_CTL_ADD, fd, &ev) == 0;
}

Status ChannelReadiness::create(int completions) {
  {
    OwnDescriptors window;
    look_fd_ = window.place(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    set_fd_ = window.place(os().epoll_create1(EPOLL_CLOEXEC));
  }
  if (look_fd_ < 0 || set_fd_ < 0) return Status::kDescriptors;
  if (!watch_readable(set_fd_, completions) || !watch_readable(set_fd_, look_fd_)) return Status::kResources;
  return Status::kOk;
}

Status ChannelReadiness::watch(int fd) { return watch_readable(set_fd_, fd) ? Status::kOk : Status::kResources; }

void ChannelReadiness::look_again() {
  // The flag and the eventfd change together under look_mu_: callers come with the link's lock and
  // without it (the preload's epoll code), and a take that drained a write whose flag it did not see
  // would leave the flag set over an empty eventfd, so that every later look_again() said nothing.
  std::lock_guard lock(look_mu_);
  ++news_;
  unseen_ = sleepers_;  // each registered poller must look once more before the news may go
  // Already readable and not yet taken: nothing to add (a link's progress may tell many channels).
  if (look_pending_) return;
  // eventfd_read and eventfd_write are libc's own calls, never the module's wrappers (own_calls.h).
  (void)eventfd_write(look_fd_, 1);
  look_pending_ = true;
}

uint64_t ChannelReadiness::enter() {
  std::lock_guard lock(look_mu_);
  ++sleepers_;
  return news_;  // it looks next: what came so far is what it will see
}

void ChannelReadiness::leave(uint64_t seen) {
  std::lock_guard lock(look_mu_);
  --sleepers_;
  // Gone without looking at the latest news: nobody waits for it on this one's account.
  if (seen != news_ && unseen_ > 0) --unseen_;
}

void ChannelReadiness::take_look_again(uint64_t* seen) {
  std::lock_guard lock(look_mu_);
  if (seen != nullptr && *seen != news_) {
    *seen = news_;
    if (unseen_ > 0) --unseen_;
  }
  if (!look_pending_ || unseen_ > 0) return;
  eventfd_t looks = 0;
  (void)eventfd_read(look_fd_, &looks);
  look_pending_ = false;
}

ChannelReadiness::~ChannelReadiness() {
  for (int fd : {set_fd_, look_fd_}) {
    if (fd >= 0) os().close(fd);
  }
}

}  // namespace tcp2rdma::transport
