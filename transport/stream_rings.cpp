// Rings that grow and shrink (docs/links.md, "Rings that grow and shrink"): a stream may start with a
// small receive ring, move to the rule's size when the peer's bytes fill it while the peer waits for
// room, and go back to the first ring when the peer has been idle a while: pinned memory follows the
// bytes in flight, not the connections that once carried bulk. The rules of a
// move are flow control's (flow_control.h, "Ring moves"); here is the memory: the reader's rings,
// the writer's mirrors of them (the bounce buffer mirrors the ring it writes into, for copies and
// for a failover's resend), and when each may go.
//
// The reader keeps its first ring for the stream's life (its mailbox, and for a link's first channel
// the link's setup area, live after it), and besides it at most the grown ring in use and one
// offered. The writer keeps its first mirror likewise, and besides it at most the grown mirror it
// writes into and the one before its last move: an offer that comes while bytes before the last
// move may still be needed from the previous mirror is declined, and the reader may offer again.
#include <algorithm>
#include <bit>
#include <cstdlib>

#include "page_memory.h"
#include "pin_budget.h"
#include "rdma_stream.h"

namespace tcp2rdma::transport {
namespace {

// Memory for a ring or a mirror, registered in the link's protection domain at iova 0 (a ring, which
// the peer writes into by offset) or at its address (a mirror, read by our own sends). Empty when
// there is no memory or the registration failed.
StreamLink::Region registered(ibv_pd* pd, uint64_t size, bool ring) {
  StreamLink::Region r;
  r.memory = allocate_pages(size);
  if (r.memory == nullptr) return r;
  r.mr = ring ? ibv_reg_mr_iova(pd, r.memory, size, 0, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)
              : ibv_reg_mr(pd, r.memory, size, 0);
  if (r.mr == nullptr) {
    free_pages(r.memory);
    r.memory = nullptr;
  }
  return r;
}

}  // namespace

void RdmaStream::maybe_grow_ring() {
  // When the peer's bytes need it: (a) it waits for room (it armed: a write of its found none) and our
  // application has read nothing of a full ring, so no update of ours could give it room (it writes
  // faster than our application reads, or both applications write before they read); or (b) it has
  // filled all the room we advertised kBulkWindows times: bulk, which a larger ring carries with
  // fewer waits for our updates. A connection that only trades what fits keeps its small ring, and
  // so does one whose writer waits only for room we read and had not advertised yet (the update that
  // answers its arm gives it): bench-links' 64 KiB echo, 32 bytes short of room in a 64 KiB ring
  // whose switch record had been read, grew every connection's rings to 1 MiB for that.
  //
  // To the full size at once, not step by step: a new offer waits until the old ring's bytes are read
  // (flow control), so an application that writes its whole answer before it reads the peer's
  // (integration.pin_limit_root: 1 MiB each way) would wait at the first step for ever.
  bool waits = flow_->ring_full() && flow_->wakeup_owed();
  if (offered_ring_.memory != nullptr || !flow_->may_offer_ring() || (!waits && windows_filled_ < kBulkWindows)) return;
  uint64_t current = flow_->our_ring_size();
  uint32_t full = std::min(options_.ring_size_log2, grow_limit_log2_);
  if ((uint64_t{1} << full) <= current || behind(flow_->produced(), grow_again_at_)) return;
  // As the pinning budget allows now, leaving room for the first rings of connections to come
  // (pin_budget.h, growth_log2_within); not worth a move unless it is larger.
  PinReservation pin = PinReservation::for_growth(full);
  uint32_t log2 = pin.choice().ring_log2;
  uint64_t size = uint64_t{1} << log2;
  if (log2 == 0 || size <= current || (offered_ring_ = registered(link_->pd(), size, true)).memory == nullptr) {
    // No room (or no memory) now: the stream goes on in its ring. Reading the budget costs system
    // calls: not again before another sixteen rings' worth of bytes came.
    grow_again_at_ = flow_->produced() + 16 * current;
    return;
  }
  offered_gen_ = flow_->offer_ring(size);  // goes out with our next mailbox update
}

void RdmaStream::look_idle() {
  // Two periodic looks with no byte of the peer's in between, and every byte read: the grown ring
  // holds nothing and carried nothing for at least a keepalive interval. Back to the first ring
  // (still registered: the mailbox is after it); the grown one goes once the peer moved (settle_rings).
  // A writer that still needs its old mirror declines, and the next idle looks offer again.
  if (!options_.shrink_when_idle || !flow_) return;
  bool grown = grown_ring_.memory != nullptr && grown_gen_ == flow_->our_ring_gen() && flow_->may_offer_ring();
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
  uint64_t retained = ledger_.retained_from();
  uint64_t kept_from = behind(retained, flow_->peer_consumed()) ? flow_->peer_consumed() : retained;
  return behind(ledger_.acked(), moved_at) || behind(kept_from, moved_at);
}

void RdmaStream::answer_ring_offer() {
  uint64_t size = flow_->offered_peer_ring_size();
  bool back_home = size == peer_ring_size_ && mirror_now_.memory != nullptr;
  // After our end no byte of ours goes anywhere: a refusal lets the peer free its new ring at once.
  bool ending = write_shut_ || move_sent_ || move_owed_ || close_owed_ || flow_->release_sent();
  bool fits = size <= (uint64_t{1} << options_.max_peer_ring_size_log2);
  if (ending || !fits || previous_mirror_needed()) {
    flow_->decline_ring_offer();
    return;
  }
  // No byte of ours is read from the mirror before the last move any more: it goes, and the one we
  // write into now becomes the one before this move.
  StreamLink::free_region(mirror_before_);
  StreamLink::Region next{};
  if (!back_home) {
    PinReservation pin = PinReservation::for_growth(static_cast<uint32_t>(std::countr_zero(size)));  // the mirror
    if ((uint64_t{1} << pin.choice().ring_log2) != size ||
        (next = registered(link_->pd(), size, false)).memory == nullptr) {
      flow_->decline_ring_offer();
      return;
    }
  }
  mirror_before_ = mirror_now_;
  mirror_now_ = next;
  flow_->adopt_ring_offer();  // no data goes until the update announcing it is posted
  peer_rkey_ = offered_peer_rkey_;
}

void RdmaStream::settle_rings() {
  // Our side as the reader: a refused offer's ring goes; after an adopted one, the old ring goes once
  // every byte the peer put there is read (the first ring stays: our mailbox is after it).
  if (flow_->ring_declined()) {
    if (offered_ring_.memory != nullptr && offered_gen_ == flow_->offered_ring_gen()) {
      StreamLink::free_region(offered_ring_);
    }
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
    // The old ring goes (unless it was the first); the offered one, if any, is the ring now.
    StreamLink::free_region(grown_ring_);
    if (offered_ring_.memory != nullptr && offered_gen_ == flow_->our_ring_gen()) {
      grown_ring_ = offered_ring_;
      grown_gen_ = offered_gen_;
      offered_ring_ = StreamLink::Region{};
    }
    if (grew) {
      ++rings_grown_;
    } else {
      ++rings_shrunk_;
      grow_again_at_ = flow_->produced();  // bulk again may grow it again at once
      windows_filled_ = 0;
    }
  }
  // Our side as the writer: the grown mirror of before our last move, once no byte of ours needs it.
  if (mirror_before_.memory != nullptr && !previous_mirror_needed()) {
    StreamLink::free_region(mirror_before_);
  }
}

RdmaStream::Mirror RdmaStream::mirror_at(uint64_t cursor) const {
  bool before_move = flow_->peer_ring_gen() != 0 && behind(cursor, flow_->moved_at());
  if (!before_move) return current_mirror();
  // Before the last move: the mirror we wrote into then (the first, unless it was a grown one).
  return mirror_before_.memory != nullptr ? Mirror{mirror_before_.memory, mirror_before_.mr, flow_->previous_peer_ring_size()}
                                          : Mirror{bounce_, bounce_mr_, flow_->previous_peer_ring_size()};
}

uint64_t RdmaStream::mirror_run(uint64_t cursor, uint64_t end, Mirror* mirror) const {
  *mirror = mirror_at(cursor);
  uint64_t offset = cursor & (mirror->size - 1);
  uint64_t n = std::min(end - cursor, mirror->size - offset);  // the mirror wraps as the ring does
  if (flow_->peer_ring_gen() != 0 && behind(cursor, flow_->moved_at())) n = std::min(n, flow_->moved_at() - cursor);
  return n;
}

StreamLink::Retired RdmaStream::leftovers() const {
  StreamLink::Retired r;
  r.ring = {ring_, ring_mr_};
  r.bounce = {bounce_, bounce_mr_};
  r.grown = {grown_ring_, offered_ring_, mirror_now_, mirror_before_};
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
  return rings_grown_;
}

uint64_t RdmaStream::rings_shrunk() const {
  std::lock_guard lock(mu_);
  return rings_shrunk_;
}

}  // namespace tcp2rdma::transport
