// What one application poller (an epoll set of the preload's translation) watches for every channel
// of one link it holds: a set of ours over the link's completion channel, the link's connection events
// and a news list's eventfd (news_list.h). One registration in the application's set stands for all
// the link's channels there: when it fires, take() runs the link's progress once (which tells each
// channel with news, and so pushes it onto the list) and hands back the channels with news, so that
// the poller looks at those only (docs/links.md, "Readiness per link"). No descriptor of a channel's
// own is made, and the kernel's limits on nested epoll wakeup paths never see one per channel.
//
// A watch is never freed while its poller may still be told of it: a channel that went, or that
// another thread still holds, may push its tag into the list after the poller forgot it (the tags are
// the poller's records, which it checks). Unbinding closes the set, not the list's eventfd.
#pragma once

#include <memory>
#include <vector>

#include "news_list.h"
#include "status.h"

namespace tcp2rdma::transport {

class RdmaStream;
class StreamLink;

class LinkWatch {
 public:
  LinkWatch() = default;
  ~LinkWatch();
  LinkWatch(const LinkWatch&) = delete;
  LinkWatch& operator=(const LinkWatch&) = delete;

  // Watches the link `stream` is a channel of. kResources (errno set) when a descriptor or memory
  // cannot be had.
  Status bind(RdmaStream& stream);
  // Whether it watches the link `stream` is on (a link is never mistaken for a later one at the same
  // address: the watch holds a weak reference).
  bool watches_link_of(const RdmaStream& stream) const;
  // Whether its set is readable whenever the link `stream` is on has an event to take (completions,
  // and connection events once they are the link's own): a look at the stream may then leave them to
  // take() (RdmaStream::readiness).
  bool takes_events_of(const RdmaStream& stream) const;
  // Whether the link it watched has ended (or it watches none).
  bool link_gone() const { return link_.expired(); }
  // Stops watching: the set goes, the news list stays.
  void unbind();
  // Readable (POLLIN) when the link has events or a channel has news: call take() then.
  int fd() const { return set_fd_; }

  // `stream`'s news (RdmaStream::wake_pollers and every completion handed to it) is pushed as `tag`
  // until unsubscribe. A tag names one subscription of a stream: subscribing the same tag again (to
  // this watch or another) moves it.
  bool subscribe(RdmaStream& stream, void* tag);
  static void unsubscribe(RdmaStream& stream, const void* tag);
  // Pushes `tag` now, as if its channel had news: a level-triggered registration reported ready is
  // looked at again on the next wait, and keeps the set readable for a poller of the set itself.
  void push(void* tag) { news_.push(tag); }

  // Takes the link's events (if the link is still there) and the news: the tags pushed since the last
  // take, in order. False when some news was lost to a lack of memory: look at every channel then.
  bool take(std::vector<void*>* tags);

 private:
  std::weak_ptr<StreamLink> link_;
  NewsList news_;
  int set_fd_ = -1;
  bool cm_watched_ = false;  // the set watches the link's connection events
};

}  // namespace tcp2rdma::transport
