// A poller's watch over one link (link_watch.h).
#include "link_watch.h"

#include <sys/epoll.h>

#include <cerrno>
#include <mutex>

#include "channel_readiness.h"
#include "os_calls.h"
#include "own_calls.h"
#include "own_descriptors.h"
#include "rdma_stream.h"
#include "stream_link.h"

namespace tcp2rdma::transport {

Status LinkWatch::bind(RdmaStream& stream) {
  OwnCalls own;  // own_calls.h
  unbind();
  if (!news_.make()) return Status::kResources;
  std::shared_ptr<StreamLink> link = stream.link_;
  int set = -1;
  {
    OwnDescriptors window;
    set = window.place(os().epoll_create1(EPOLL_CLOEXEC));
  }
  if (set < 0) return Status::kResources;
  std::lock_guard lock(link->mu());
  bool cm = link->cm_watched();
  if (!watch_readable(set, link->completion_fd()) || !watch_readable(set, news_.fd()) ||
      (cm && !watch_readable(set, link->cm_fd()))) {
    int error = errno;
    os().close(set);
    errno = error;
    return Status::kResources;
  }
  set_fd_ = set;
  cm_watched_ = cm;
  link_ = link;
  link->setup().pollers_join(+1);
  return Status::kOk;
}

bool LinkWatch::watches_link_of(const RdmaStream& stream) const {
  std::shared_ptr<StreamLink> link = link_.lock();
  return link != nullptr && link == stream.link_;
}

bool LinkWatch::takes_events_of(const RdmaStream& stream) const {
  std::shared_ptr<StreamLink> link = link_.lock();
  return link != nullptr && link == stream.link_ && (cm_watched_ || !link->cm_watched());
}

void LinkWatch::unbind() {
  if (std::shared_ptr<StreamLink> link = link_.lock()) {
    // A take of ours may have left the queue unarmed: armed again for whoever else waits on the link
    // (the listener's thread for its next open) now that this poller stops looking.
    std::lock_guard lock(link->mu());
    link->setup().pollers_join(-1);
    if (!link->armed() && !link->stopped()) LinkProgress::arm_for_sleep(*link);
  }
  if (set_fd_ >= 0) {
    OwnCalls own;  // own_calls.h
    os().close(set_fd_);
  }
  set_fd_ = -1;
  cm_watched_ = false;
  link_.reset();
}

bool LinkWatch::subscribe(RdmaStream& stream, void* tag) {
  return stream.subscribe_news(&news_, tag);
}

void LinkWatch::unsubscribe(RdmaStream& stream, const void* tag) { stream.unsubscribe_news(tag); }

bool LinkWatch::take(std::vector<void*>* tags, bool lazy) {
  news_.begin_take();
  if (std::shared_ptr<StreamLink> link = link_.lock()) {
    std::lock_guard lock(link->mu());
    // A server's link watches its own connection events only once the accept is done (stream_link.h).
    if (!cm_watched_ && link->cm_watched() && set_fd_ >= 0) cm_watched_ = watch_readable(set_fd_, link->cm_fd());
    // Its set watches the connection events once it holds them (cm_watched_): taken when quiet.
    LinkProgress::drain(*link, false, cm_watched_, lazy);
  }
  return news_.take(tags);
}

int LinkWatch::spin(std::vector<void*>* tags, bool* whole) {
  int taken = 0;
  news_.begin_take();
  if (std::shared_ptr<StreamLink> link = link_.lock()) {
    std::lock_guard lock(link->mu());
    taken = LinkProgress::spin(*link);
  }
  *whole = news_.take(tags);
  return taken;
}

int LinkWatch::busy_poll_us(bool* adaptive) const {
  std::shared_ptr<StreamLink> link = link_.lock();
  if (link == nullptr) return 0;
  return link->busy_poll_us(adaptive);
}

bool LinkWatch::spin_yields() const {
  std::shared_ptr<StreamLink> link = link_.lock();
  return link != nullptr && link->spin_yields();
}

bool LinkWatch::arm_for_sleep(std::shared_ptr<StreamLink>* held) {
  *held = link_.lock();
  if (*held == nullptr) return false;
  StreamLink& link = **held;
  std::lock_guard lock(link.mu());
  link.count_event_sleeper(1);
  // Once counted, a take by another thread arms the queue again (LinkProgress::drain): armed now, it stays so.
  return LinkProgress::arm_for_sleep(link);
}

void LinkWatch::end_sleep(StreamLink& link) {
  std::lock_guard lock(link.mu());
  link.count_event_sleeper(-1);
}

void LinkWatch::make_eager() {
  std::shared_ptr<StreamLink> link = link_.lock();
  if (link == nullptr) return;
  std::lock_guard lock(link->mu());
  if (!link->make_eager()) return;
  // What came before the arming is told to its channels (and so pushed to the pollers' lists).
  LinkProgress::arm_for_sleep(*link);
}

LinkWatch::~LinkWatch() { unbind(); }

}  // namespace tcp2rdma::transport
