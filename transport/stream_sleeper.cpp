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
    for (int fd : fds) {
      if (fd >= 0 && std::find(link_fds_.begin(), link_fds_.end(), fd) == link_fds_.end()) link_fds_.push_back(fd);
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

void StreamSleeper::append_pollfds(std::vector<pollfd>* out) const {
  if (news_.fd() >= 0) out->push_back({news_.fd(), POLLIN, 0});
  for (int fd : link_fds_) out->push_back({fd, POLLIN, 0});
}

}  // namespace tcp2rdma::transport
