// What a thread sleeps on while it waits for streams in one call of ours (poll, select, the switch's
// wait): a news list of its own (one eventfd a thread, made at its first such wait), which every
// stream it waits for is subscribed to for the call, and the descriptors of those streams' links
// (completion channel, connection events), once per link. No descriptor of any channel's own, and
// nothing nested: the kernel's limits on epoll wakeup paths never see one (docs/links.md,
// "Readiness per link").
//
// The order that loses no wakeup: take_news(), then look at every stream (readiness(), which takes
// the links' events and hands out their completions), then sleep on pollfds(). News that comes
// during or after the looks is on the list, or is a link event not yet taken.
#pragma once

#include <poll.h>

#include <vector>

#include "news_list.h"

namespace tcp2rdma::transport {

class RdmaStream;

class StreamSleeper {
 public:
  StreamSleeper() = default;
  ~StreamSleeper() { clear(); }
  StreamSleeper(const StreamSleeper&) = delete;
  StreamSleeper& operator=(const StreamSleeper&) = delete;

  // `stream` wakes this sleeper until clear(); the caller holds it until then. False when the
  // thread's eventfd or memory cannot be had: news from other threads then wakes nobody (the caller
  // looks again after a short sleep); the link's events still do.
  bool add(RdmaStream& stream);
  // Every stream added is let go.
  void clear();
  // Before a round of looks.
  void take_news();
  // The same, for a caller that ends the looks with end_looks() before it sleeps: the news its own
  // looks push (a link's completions handed out by its thread) writes no eventfd, where it cost a
  // write and, after a sleep that returned at once, a read.
  void take_news_for_looks();
  // After the looks: true when news came meanwhile (its own, or another thread's while the list
  // held it): look again instead of sleeping.
  bool end_looks() { return news_.end_take(); }
  // A spin before the sleep (after end_looks() found no news): begin_spin(), then spin() a poll, each
  // link's completions handed out (RdmaStream::spin_link: the news they bring this sleeper writes no
  // eventfd), news() whether any came for it, and end_spin() after it (news from then on writes the
  // eventfd: the next round's take_news_for_looks() takes it).
  void begin_spin() { news_.begin_take(); }
  void spin();
  bool news() { return news_.holds_news(); }
  void end_spin() { (void)news_.end_take(); }
  // The spin's rule: the longest busy_poll_us of the links (*adaptive cleared unless all say
  // adaptive), and whether any gives the CPU away between polls.
  int spin_rule(bool* adaptive, bool* yields) const;
  // What to sleep on, appended to *out: the list's eventfd and each link's descriptors, once.
  void append_pollfds(std::vector<pollfd>* out) const;
  // After the sleep: `slept` is what append_pollfds appended, with the kernel's revents. Each link
  // whose descriptor fired is told (RdmaStream::note_link_fired), so that the next round's looks
  // take its events, and only then (RdmaStream::readiness, only_fired).
  void note_fired(const pollfd* slept) const;

 private:
  NewsList news_;
  std::vector<RdmaStream*> streams_;
  struct LinkFd {
    int fd;
    RdmaStream* stream;  // a stream of the link, held by the caller until clear()
    bool cm;             // the connection events' (else the completion channel's)
  };
  std::vector<LinkFd> link_fds_;  // each distinct
  std::vector<void*> taken_;   // scratch
};

}  // namespace tcp2rdma::transport
