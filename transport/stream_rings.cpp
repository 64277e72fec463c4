// A channel's rings that grow and shrink (docs/links.md, "Rings that grow and shrink"): what the
// channel does around its RingGrowth (ring_growth.h), which holds the memory beyond its first ring and
// mirror. Everything here runs with mu_ held, but the counters' getters.
#include <algorithm>

#include "rdma_stream.h"

namespace tcp2rdma::transport {

void RdmaStream::maybe_grow_ring() { rings_.maybe_grow(*flow_, options_, link_->pd()); }

void RdmaStream::look_idle() {
  if (!flow_ || !rings_.look_idle(*flow_, options_, ring_size_)) return;
  if (Status s = send_credits(); s != Status::kOk) fail(s);  // the offer goes out with this update
}

void RdmaStream::answer_ring_offer() {
  // A held message is in the ring we write into now: it goes before we may move to another (the
  // offer waits for the next serve() when it cannot go yet).
  if (held_.bytes > 0) {
    held_.due = true;
    if (post_held() != Status::kOk) return;
  }
  // After our end no byte of ours goes anywhere: a refusal lets the peer free its new ring at once.
  bool ending = write_shut_ || move_sent_ || move_owed_ || close_owed_ || flow_->release_sent();
  rings_.answer_offer(*flow_, options_, ledger_, link_->pd(), peer_ring_size_, ending, &peer_rkey_);
}

void RdmaStream::settle_rings() { rings_.settle(*flow_, ledger_); }

uint64_t RdmaStream::mirror_run(uint64_t cursor, uint64_t end, Mirror* mirror) const {
  *mirror = rings_.at(cursor, *flow_, {bounce_, bounce_mr_}, peer_ring_size_);
  uint64_t offset = cursor & (mirror->size - 1);
  uint64_t n = std::min(end - cursor, mirror->size - offset);  // the mirror wraps as the ring does
  if (flow_->peer_ring_gen() != 0 && behind(cursor, flow_->moved_at())) n = std::min(n, flow_->moved_at() - cursor);
  return n;
}

StreamLink::Retired RdmaStream::leftovers() const {
  StreamLink::Retired r;
  r.ring = {ring_, ring_mr_};
  r.bounce = {bounce_, bounce_mr_};
  r.grown = rings_.leftovers();
  return r;
}

uint64_t RdmaStream::ring_size() const {
  std::lock_guard lock(mu_);
  return flow_ ? flow_->our_ring_size() : ring_size_;
}

uint64_t RdmaStream::peer_ring_size() const {
  std::lock_guard lock(mu_);
  return flow_ ? flow_->peer_ring_size() : peer_ring_size_;
}

uint64_t RdmaStream::rings_grown() const {
  std::lock_guard lock(mu_);
  return rings_.grown();
}

uint64_t RdmaStream::rings_shrunk() const {
  std::lock_guard lock(mu_);
  return rings_.shrunk();
}

}  // namespace tcp2rdma::transport
