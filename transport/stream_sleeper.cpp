// A thread's sleep on the streams of one call (stream_sleeper.h).
#include "stream_sleeper.h"

#include <algorithm>
#include <new>

#include "rdma_stream.h"

namespace tcp2rdma::transport {

bool StreamSleeper::add(RdmaStream& stream) {
  int fds[2] = {-1, -1};
  stream.link_descriptors(&fds[0], &fds[1]);
  try {
    for (int i = 0; i < 2; ++i) {
      int fd = fds[i];
      bool known = std::any_of(link_fds_.begin(), link_fds_.end(), [fd](const LinkFd& l) { return l.fd == fd; });
      if (fd >= 0 && !known) link_fds_.push_back({fd, &stream, i == 1});
    }
    streams_.push_back(&stream);
  } catch (const std::bad_alloc&) {
    return false;  // the link's events may go unwatched too: the caller's short sleeps cover them
  }
  // The sleeper itself is the tag: one subscription per (stream, sleeper), whatever entries of the
  // call name the stream.
  if (!news_.make() || !stream.subscribe_news(&news_, this)) {
    streams_.pop_back();
    return false;
  }
  stream.count_event_sleeper(+1);
  return true;
}

void StreamSleeper::clear() {
  for (RdmaStream* s : streams_) {
    s->unsubscribe_news(this);
    s->count_event_sleeper(-1);
  }
  streams_.clear();
  link_fds_.clear();
}

void StreamSleeper::take_news() { news_.take(&taken_); }

void StreamSleeper::take_news_for_looks() {
  news_.take(&taken_);
  news_.begin_take();
}

void StreamSleeper::spin() {
  for (const LinkFd& l : link_fds_) {
    if (!l.cm) l.stream->spin_link();  // each link once: its completion channel's entry
  }
}

int StreamSleeper::spin_rule(bool* adaptive, bool* yields) const {
  int us = 0;
  *adaptive = true;
  *yields = false;
  for (const LinkFd& l : link_fds_) {
    if (l.cm) continue;
    bool yield = false;
    us = std::max(us, l.stream->spin_rule(adaptive, &yield));
    *yields = *yields || yield;
  }
  return us;
}

void StreamSleeper::append_pollfds(std::vector<pollfd>* out) const {
  if (news_.fd() >= 0) out->push_back({news_.fd(), POLLIN, 0});
  for (const LinkFd& l : link_fds_) out->push_back({l.fd, POLLIN, 0});
}

void StreamSleeper::note_fired(const pollfd* slept) const {
  if (news_.fd() >= 0) ++slept;
  for (size_t i = 0; i < link_fds_.size(); ++i) {
    if (slept[i].revents != 0) link_fds_[i].stream->note_link_fired(!link_fds_[i].cm, link_fds_[i].cm);
  }
}

}  // namespace tcp2rdma::transport
