// What an application's poller watches for one channel (stream) of a link: an epoll set of the
// channel's own over the link's completion channel, the link's connection events and the channel's
// "look again" eventfd (docs/links.md, "Readiness"). Two descriptors a channel; the link's sleep set
// is the link's. The link's completion event wakes every channel's pollers, whose readiness() then
// takes the link's completions to the channels they name; a channel that another thread handed news
// is told by look_again().
#pragma once

#include <mutex>

#include "status.h"

namespace tcp2rdma::transport {

class ChannelReadiness {
 public:
  ChannelReadiness() = default;
  ~ChannelReadiness();
  ChannelReadiness(const ChannelReadiness&) = delete;
  ChannelReadiness& operator=(const ChannelReadiness&) = delete;

  // The set and the eventfd, with `completions` (the link's completion channel) in it.
  Status create(int completions);
  // Adds a descriptor of the link's (its connection events, once they are the link's own).
  Status watch(int fd);
  int fd() const { return set_fd_; }
  // Makes fd() readable until take_look_again().
  void look_again();
  void take_look_again();

 private:
  int set_fd_ = -1;
  int look_fd_ = -1;  // eventfd: "look again"; only take_look_again() drains it
  std::mutex look_mu_;         // a leaf lock: the flag and the eventfd's count change together
  bool look_pending_ = false;  // look_fd_ holds a count (readable)
};

// fd joins the epoll set `set`, readable when fd is.
bool watch_readable(int set, int fd);

}  // namespace tcp2rdma::transport
