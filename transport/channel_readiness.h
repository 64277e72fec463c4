// What an application's poller watches for one channel (stream) of a link: an epoll set of the
// channel's own over the link's completion channel, the link's connection events and the channel's
// "look again" eventfd (docs/links.md, "Readiness"). Two descriptors a channel, made only when a
// poller first asks for them (fd()): a channel that nobody polls through a descriptor of its own
// (blocking calls sleep on the link) costs none. The link's completion event wakes every channel's
// pollers, whose readiness() then takes the link's completions to the channels they name; a channel
// that another thread handed news is told by look_again().
// An event loop's epoll sets need none of that: each (set, link) pair has one LinkWatch
// (link_watch.h), and look_again() pushes the channel onto the news list of every watch that holds
// it (a "sink"), so that the loop looks at the channels that changed only.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "news_list.h"
#include "status.h"

namespace tcp2rdma::transport {

class ChannelReadiness {
 public:
  ChannelReadiness() = default;
  ~ChannelReadiness();
  ChannelReadiness(const ChannelReadiness&) = delete;
  ChannelReadiness& operator=(const ChannelReadiness&) = delete;

  // The descriptors the set is to watch: the link's completion channel, and its connection events
  // once they are the link's own (watch). Nothing is made yet.
  void create(int completions) { completions_fd_ = completions; }
  Status watch(int fd);
  // The set, made at the first call (with the eventfd, readable at once if news came before): -1 when
  // it cannot be made (descriptors or memory short), and errno says why.
  int fd();
  // Makes fd() readable until the news is taken, and pushes the channel onto every sink.
  void look_again();
  // A poller's news list that is to be told of this channel's news, as `tag` (the poller's record of
  // the channel). One sink a tag: subscribing a tag again replaces its list. False: no memory.
  bool subscribe(NewsList* list, void* tag);
  void unsubscribe(const void* tag);
  // Pollers that sleep on fd() in a call of ours register for the call (poll, select, the switch's
  // wait: enter() before they first look, leave() at the end) and say what they saw (*seen). News is
  // taken (fd() made quiet) only once every registered poller has looked since it came: another
  // caller's look, which may have asked about bytes where a sleeper waits for room, must not take the
  // news from under that sleeper. Callers that do not register (epoll's) take it when nobody waits.
  uint64_t enter();
  void leave(uint64_t seen);
  // After a look at the stream: `seen` is the registered caller's (null for others).
  void take_look_again(uint64_t* seen = nullptr);

 private:
  int make_locked();

  int completions_fd_ = -1;
  int cm_fd_ = -1;
  std::mutex look_mu_;          // a leaf lock: what follows changes together
  int set_fd_ = -1;
  int look_fd_ = -1;           // eventfd: "look again"; only take_look_again() drains it
  bool look_pending_ = false;  // news not yet taken (look_fd_, once made, holds a count)
  uint64_t news_ = 0;          // look_again() calls so far: the generation a poller has seen
  int sleepers_ = 0;           // registered pollers
  int unseen_ = 0;             // registered pollers that have not looked since the last news
  struct Sink {
    NewsList* list;
    void* tag;
  };
  std::vector<Sink> sinks_;  // usually none or one (a channel in one epoll set)
};

// fd joins the epoll set `set`, readable when fd is.
bool watch_readable(int set, int fd);

}  // namespace tcp2rdma::transport
