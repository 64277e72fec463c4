// Who is told of a channel's news (channel_readiness.h).
#include "channel_readiness.h"

#include <sys/epoll.h>

#include <new>

#include "os_calls.h"

namespace tcp2rdma::transport {

bool watch_readable(int set, int fd) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  return os().epoll_ctl(set, EPOLL_CTL_ADD, fd, &ev) == 0;
}

void ChannelReadiness::look_again() {
  std::lock_guard lock(mu_);
  for (const Sink& sink : sinks_) sink.list->push(sink.tag);
}

bool ChannelReadiness::subscribe(NewsList* list, void* tag) {
  std::lock_guard lock(mu_);
  for (Sink& sink : sinks_) {
    if (sink.tag == tag) {
      sink.list = list;
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
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < sinks_.size(); ++i) {
    if (sinks_[i].tag != tag) continue;
    sinks_[i] = sinks_.back();
    sinks_.pop_back();
    return;
  }
}

}  // namespace tcp2rdma::transport
