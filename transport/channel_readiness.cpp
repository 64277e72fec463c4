// A channel's pollable descriptor (channel_readiness.h).
#include "channel_readiness.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>

#include <cerrno>
#include <new>

#include "os_calls.h"
#include "own_descriptors.h"

namespace tcp2rdma::transport {

bool watch_readable(int set, int fd) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  return os().epoll_ctl(set, EPOLL_CTL_ADD, fd, &ev) == 0;
}

Status ChannelReadiness::watch(int fd) {
  std::lock_guard lock(look_mu_);
  cm_fd_ = fd;
  if (set_fd_ < 0) return Status::kOk;  // the set, when made, watches it
  return watch_readable(set_fd_, fd) ? Status::kOk : Status::kResources;
}

int ChannelReadiness::fd() {
  std::lock_guard lock(look_mu_);
  return set_fd_ >= 0 ? set_fd_ : make_locked();
}

int ChannelReadiness::make_locked() {
  int look = -1, set = -1;
  {
    OwnDescriptors window;
    look = window.place(::eventfd(look_pending_ ? 1 : 0, EFD_NONBLOCK | EFD_CLOEXEC));
    set = window.place(os().epoll_create1(EPOLL_CLOEXEC));
  }
  bool watched = look >= 0 && set >= 0 && watch_readable(set, completions_fd_) && watch_readable(set, look) &&
                 (cm_fd_ < 0 || watch_readable(set, cm_fd_));
  if (!watched) {
    int error = errno;
    for (int fd : {look, set}) {
      if (fd >= 0) os().close(fd);
    }
    errno = error;
    return -1;
  }
  look_fd_ = look;
  set_fd_ = set;
  return set_fd_;
}

void ChannelReadiness::look_again() {
  // The flag and the eventfd change together under look_mu_: callers come with the link's lock and
  // without it (the preload's epoll code), and a take that drained a write whose flag it did not see
  // would leave the flag set over an empty eventfd, so that every later look_again() said nothing.
  std::lock_guard lock(look_mu_);
  for (const Sink& sink : sinks_) sink.list->push(sink.tag);
  ++news_;
  unseen_ = sleepers_;  // each registered poller must look once more before the news may go
  // Already readable and not yet taken: nothing to add (a link's progress may tell many channels).
  if (look_pending_) return;
  // eventfd_read and eventfd_write are libc's own calls, never the module's wrappers (own_calls.h).
  if (look_fd_ >= 0) (void)eventfd_write(look_fd_, 1);
  look_pending_ = true;
}

bool ChannelReadiness::subscribe(NewsList* list, void* tag) {
  std::lock_guard lock(look_mu_);
  for (Sink& sink : sinks_) {
    if (sink.tag == tag) {
      sink = {list, tag};
      return true;
    }
  }
  try {
    sinks_.push_back({list, tag});
  } catch (const std::bad_alloc&) {
    return false;
  }
  return true;
}

void ChannelReadiness::unsubscribe(const void* tag) {
  std::lock_guard lock(look_mu_);
  for (size_t i = 0; i < sinks_.size(); ++i) {
    if (sinks_[i].tag != tag) continue;
    sinks_[i] = sinks_.back();
    sinks_.pop_back();
    return;
  }
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
  if (look_fd_ >= 0) (void)eventfd_read(look_fd_, &looks);
  look_pending_ = false;
}

ChannelReadiness::~ChannelReadiness() {
  for (int fd : {set_fd_, look_fd_}) {
    if (fd >= 0) os().close(fd);
  }
}

}  // namespace tcp2rdma::transport
