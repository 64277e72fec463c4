// Rings that grow and shrink (docs/links.md, "Rings that grow and shrink"): a stream may start with a
// small receive ring and move to its full size once the peer's bytes fill it, and back to the first
// ring when the peer has been idle a while (pinned memory follows the bytes in flight, not the
// connections that once carried bulk). The rules of a move are flow control's
// (flow_control.h, "Ring moves"); here is the memory: the reader's grown ring, the writer's mirror of
// it (the bounce buffer mirrors the ring it writes into, for copies and for a failover's resend), and
// when each may go.
//
// The reader keeps its first ring for the stream's life: its mailbox (and, for a link's first channel,
// the link's setup area) lives after it. The writer keeps its first mirror likewise and holds at most
// one grown mirror: an offer that would need a second (or comes while bytes before the last move are
// still needed from the previous mirror) is declined, and the reader may offer again later.
#include <algorithm>
#include <bit>
#include <cstdlib>

#include "page_memory.h"
#include "pin_budget.h"
#include "rdma_stream.h"

namespace tcp2rdma::transport {
namespace {

// Memory for a ring or a mirror, registered in the link's protection domain at iova 0 (a ring, which
// the peer writes into by offset) or at its address (a mirror, read by our own sends).
uint8_t* registered_pages(ibv_pd* pd, uint64_t size, bool ring, ibv_mr** mr) {
  uint8_t* memory = allocate_pages(size);
  if (memory == nullptr) return nullptr;
  *mr = ring ? ibv_reg_mr_iova(pd, memory, size, 0, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)
             : ibv_reg_mr(pd, memory, size, 0);
  if (*mr == nullptr) {
    std::free(memory);
    return nullptr;
  }
  return memory;
}

void release_pages(uint8_t** memory, ibv_mr** mr) {
  if (*mr != nullptr) ibv_dereg_mr(*mr);
  std::free(*memory);
  *memory = nullptr;
  *mr = nullptr;
}

}  // namespace

void RdmaStream::maybe_grow_ring() {
  // Once, to the full size, and only when the peer has filled all the room we advertised: it writes
  // faster than our application reads, or in bulk. A connection that only trades small messages
  // keeps its small ring.
  if (extra_ring_ != nullptr || !flow_->may_offer_ring() || !flow_->window_full()) return;
  uint64_t current = flow_->our_ring_size();
  uint32_t full = std::min(options_.ring_size_log2, grow_limit_log2_);
  if ((uint64_t{1} << full) <= current || behind(flow_->produced(), grow_again_at_)) return;
  // Reading the budget costs system calls: after a try that found no room, not again before another
  // sixteen rings' worth of bytes came.
  grow_again_at_ = flow_->produced() + 16 * current;
  // As the pinning budget allows now, leaving room for the first rings of connections to come
  // (pin_budget.h, growth_log2_within); not worth a move unless it is larger.
  PinReservation pin = PinReservation::for_growth(full);
  uint32_t log2 = pin.choice().ring_log2;
  if (log2 == 0 || (uint64_t{1} << log2) <= current) return;
  uint64_t size = uint64_t{1} << log2;
  extra_ring_ = registered_pages(link_->pd(), size, true, &extra_ring_mr_);
  if (extra_ring_ == nullptr) return;  // no memory now: the stream goes on in its small ring
  extra_gen_ = flow_->offer_ring(size);  // goes out with our next mailbox update
}

void RdmaStream::look_idle() {
  // Two periodic looks with no byte of the peer's in between, and every byte read: the grown ring
  // holds nothing and carried nothing for at least a keepalive interval. Back to the first ring
  // (still registered: the mailbox is after it); the grown one goes once the peer moved (settle_rings).
  // A writer that still needs its old mirror declines, and the next idle looks offer again.
  if (!options_.shrink_when_idle || !flow_) return;
  bool grown = extra_ring_ != nullptr && extra_gen_ == flow_->our_ring_gen() && flow_->may_offer_ring();
  uint64_t produced = flow_->produced();
  bool idle = grown && idle_marked_ && produced == idle_mark_ && flow_->consumed() == produced;
  idle_mark_ = produced;
  idle_marked_ = grown && !idle;
  if (!idle) return;
  flow_->offer_ring(ring_size_);
  if (Status s = send_credits(); s != Status::kOk) fail(s);  // the offer goes out with this update
}

bool RdmaStream::previous_mirror_needed() const {
  if (flow_->peer_ring_gen() == 0) return false;  // never moved
  uint64_t moved_at = flow_->moved_at();
  // Bytes before the move may still be read by the adapter (a send not completed, which a
  // retransmission reads again) or needed by a failover's resend (not yet consumed by the peer).
  uint64_t kept_from = behind(retained_from_, flow_->peer_consumed()) ? flow_->peer_consumed() : retained_from_;
  return behind(acked_, moved_at) || behind(kept_from, moved_at);
}

void RdmaStream::answer_ring_offer() {
  uint64_t size = flow_->offered_peer_ring_size();
  bool back_home = size == peer_ring_size_ && extra_current_;
  // After our end no byte of ours goes anywhere: a refusal lets the peer free its new ring at once.
  bool ending = write_shut_ || move_sent_ || move_owed_ || close_owed_ || flow_->release_sent();
  bool fits = size <= (uint64_t{1} << options_.max_peer_ring_size_log2);
  if (ending || !fits || previous_mirror_needed() || (!back_home && extra_current_)) {
    flow_->decline_ring_offer();
    return;
  }
  if (!back_home) {
    if (extra_bounce_ != nullptr) release_pages(&extra_bounce_, &extra_bounce_mr_);  // idle: not needed
    PinReservation pin = PinReservation::for_growth(static_cast<uint32_t>(std::countr_zero(size)));  // the mirror
    if ((uint64_t{1} << pin.choice().ring_log2) != size ||
        (extra_bounce_ = registered_pages(link_->pd(), size, false, &extra_bounce_mr_)) == nullptr) {
      flow_->decline_ring_offer();
      return;
    }
  }
  extra_current_ = !back_home;
  flow_->adopt_ring_offer();  // no data goes until the update announcing it is posted
  peer_rkey_ = offered_peer_rkey_;
}

void RdmaStream::settle_rings() {
  // Our side as the reader: a refused offer's ring goes; after an adopted one, the old ring goes once
  // every byte the peer put there is read (the first ring stays: our mailbox is after it).
  if (flow_->ring_declined()) {
    if (extra_ring_ != nullptr && extra_gen_ == flow_->offered_ring_gen()) release_pages(&extra_ring_, &extra_ring_mr_);
    // A larger ring refused: not that size again (the peer will not mirror it, or could not pin it),
    // half of it at most. A smaller one (our first, look_idle) is offered again at a later idle look.
    if (flow_->offered_ring_size() > flow_->our_ring_size()) {
      grow_limit_log2_ = static_cast<uint32_t>(std::countr_zero(flow_->offered_ring_size())) - 1;
    }
    flow_->on_offer_declined_done();
  }
  if (flow_->ring_retirable()) {
    bool grew = flow_->offered_ring_size() > flow_->our_ring_size();
    flow_->on_old_ring_retired();
    if (grew) {
      ++rings_grown_;
    } else {
      ++rings_shrunk_;
      grow_again_at_ = flow_->produced();  // bulk again may grow it again at once
    }
    if (extra_ring_ != nullptr && extra_gen_ != flow_->our_ring_gen()) release_pages(&extra_ring_, &extra_ring_mr_);
  }
  // Our side as the writer: a grown mirror we no longer write into, once no byte of ours needs it.
  if (extra_bounce_ != nullptr && !extra_current_ && !previous_mirror_needed()) {
    release_pages(&extra_bounce_, &extra_bounce_mr_);
  }
}

RdmaStream::Mirror RdmaStream::mirror_at(uint64_t cursor) const {
  bool before_move = flow_->peer_ring_gen() != 0 && behind(cursor, flow_->moved_at());
  if (!before_move) return current_mirror();
  // Before the last move: the mirror we wrote into then, the other one.
  return extra_current_ ? Mirror{bounce_, bounce_mr_, flow_->previous_peer_ring_size()}
                        : Mirror{extra_bounce_, extra_bounce_mr_, flow_->previous_peer_ring_size()};
}

uint64_t RdmaStream::mirror_run(uint64_t cursor, uint64_t end, Mirror* mirror) const {
  *mirror = mirror_at(cursor);
  uint64_t offset = cursor & (mirror->size - 1);
  uint64_t n = std::min(end - cursor, mirror->size - offset);  // the mirror wraps as the ring does
  if (flow_->peer_ring_gen() != 0 && behind(cursor, flow_->moved_at())) n = std::min(n, flow_->moved_at() - cursor);
  return n;
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
  return rings_grown_;
}

uint64_t RdmaStream::rings_shrunk() const {
  std::lock_guard lock(mu_);
  return rings_shrunk_;
}

}  // namespace tcp2rdma::transport
