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
  // `lazy` (an event loop that arms the queue itself before it sleeps: arm_for_sleep): the queue is
  // left unarmed when nobody else relies on its event (LinkProgress::drain).
  bool take(std::vector<void*>* tags, bool lazy = false);
  // An event loop's spin: the completions on the link's queue handed out (no event taken, nothing
  // armed, no system call) and the news taken as take() does. Returns how many completions came.
  int spin(std::vector<void*>* tags, bool* whole);
  // How long the link's channels ask an event loop to poll before it sleeps, and whether adaptively
  // (StreamLink::busy_poll_us).
  int busy_poll_us(bool* adaptive) const;
  // Whether a spin on the link gives the CPU away between polls (StreamLink::spin_yields).
  bool spin_yields() const;

  // A thread about to sleep on the set: the link's queue armed and the thread counted as relying on
  // its event until end_sleep(*held) (held keeps the link for it). True when completions came before
  // the arming: they were handed out, and the news is on the list (the set is readable).
  bool arm_for_sleep(std::shared_ptr<StreamLink>* held);
  static void end_sleep(StreamLink& link);
  // For good: someone may sleep on this link's event outside the module's waits (the set is watched
  // by another poller, or a wait on it began before the record joined): the queue is armed now and
  // after every take (StreamLink::make_eager).
  void make_eager();

 private:
  std::weak_ptr<StreamLink> link_;
  NewsList news_;
  int set_fd_ = -1;
  bool cm_watched_ = false;  // the set watches the link's connection events
};

}  // namespace tcp2rdma::transport
