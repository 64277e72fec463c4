// Who is to be told of a channel's news: the pollers of the application that wait for it, each
// through its own news list (news_list.h). An event loop's epoll set has one list per link it holds
// channels of (link_watch.h); a thread in poll, select or the switch's wait has one of its own
// (stream_sleeper.h). A channel has no descriptor of its own: its news is pushed onto each
// subscriber's list, whose eventfd wakes the subscriber, and the link's own events (completions,
// connection events) wake whoever sleeps on the link's descriptors, whose next look at any channel of
// the link hands them out (docs/links.md, "Readiness per link").
#pragma once

#include <mutex>
#include <vector>

#include "news_list.h"

namespace tcp2rdma::transport {

class ChannelReadiness {
 public:
  ChannelReadiness() = default;
  ChannelReadiness(const ChannelReadiness&) = delete;
  ChannelReadiness& operator=(const ChannelReadiness&) = delete;

  // Pushes the channel onto every subscriber's list. Callers come with the link's lock and without
  // it (the preload's epoll code): the subscriptions have a leaf lock of their own.
  void look_again();
  // A poller's news list that is to be told of this channel's news, as `tag` (the poller's record of
  // the channel). One subscription a tag: subscribing a tag again replaces its list. False: no memory.
  bool subscribe(NewsList* list, void* tag);
  void unsubscribe(const void* tag);

 private:
  struct Sink {
    NewsList* list;
    void* tag;
  };
  std::mutex mu_;            // a leaf lock (NewsList's own is taken under it)
  std::vector<Sink> sinks_;  // usually none or one (a channel in one epoll set, or one poll call)
};

// fd joins the epoll set `set`, readable when fd is.
bool watch_readable(int set, int fd);

}  // namespace tcp2rdma::transport
