// Rings that grow and shrink: the memory beyond a channel's first ring and mirror (ring_growth.h).
#include "ring_growth.h"

#include <algorithm>
#include <bit>
#include <cstdlib>

#include "flow_control.h"
#include "page_memory.h"
#include "pin_budget.h"
#include "rdma_stream.h"
#include "sent_ledger.h"

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

void RingGrowth::maybe_grow(FlowControl& flow, const StreamOptions& options, ibv_pd* pd) {
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
  bool waits = flow.ring_full() && flow.wakeup_owed();
  if (offered_ring_.memory != nullptr || !flow.may_offer_ring() || (!waits && windows_filled_ < kBulkWindows)) return;
  uint64_t current = flow.our_ring_size();
  uint32_t full = std::min(options.ring_size_log2, grow_limit_log2_);
  if ((uint64_t{1} << full) <= current || behind(flow.produced(), grow_again_at_)) return;
  // As the pinning budget allows now, leaving room for the first rings of connections to come
  // (pin_budget.h, growth_log2_within); not worth a move unless it is larger.
  PinReservation pin = PinReservation::for_growth(full);
  uint32_t log2 = pin.choice().ring_log2;
  uint64_t size = uint64_t{1} << log2;
  if (log2 == 0 || size <= current || (offered_ring_ = registered(pd, size, true)).memory == nullptr) {
    // No room (or no memory) now: the stream goes on in its ring. Reading the budget costs system
    // calls: not again before another sixteen rings' worth of bytes came.
    grow_again_at_ = flow.produced() + 16 * current;
    return;
  }
  offered_gen_ = flow.offer_ring(size);  // goes out with our next mailbox update
}

bool RingGrowth::look_idle(FlowControl& flow, const StreamOptions& options, uint64_t first_size) {
  // Two periodic looks with no byte of the peer's in between, and every byte read: the grown ring
  // holds nothing and carried nothing for at least a keepalive interval. Back to the first ring
  // (still registered: the mailbox is after it); the grown one goes once the peer moved (settle).
  // A writer that still needs its old mirror declines, and the next idle looks offer again.
  if (!options.shrink_when_idle) return false;
  bool grown = grown_ring_.memory != nullptr && grown_gen_ == flow.our_ring_gen() && flow.may_offer_ring();
  uint64_t produced = flow.produced();
  bool idle = grown && idle_marked_ && produced == idle_mark_ && flow.consumed() == produced;
  idle_mark_ = produced;
  idle_marked_ = grown && !idle;
  if (!idle) return false;
  flow.offer_ring(first_size);
  return true;
}

bool RingGrowth::previous_mirror_needed(const FlowControl& flow, const SentLedger& ledger) const {
  if (flow.peer_ring_gen() == 0) return false;  // never moved
  uint64_t moved_at = flow.moved_at();
  // Bytes before the move may still be read by the adapter (a send not completed, which a
  // retransmission reads again) or needed by a failover's resend (not yet consumed by the peer).
  uint64_t retained = ledger.retained_from();
  uint64_t kept_from = behind(retained, flow.peer_consumed()) ? flow.peer_consumed() : retained;
  return behind(ledger.acked(), moved_at) || behind(kept_from, moved_at);
}

void RingGrowth::answer_offer(FlowControl& flow, const StreamOptions& options, const SentLedger& ledger, ibv_pd* pd,
                              uint64_t peer_first_size, bool ending, uint32_t* peer_rkey) {
  uint64_t size = flow.offered_peer_ring_size();
  bool back_home = size == peer_first_size && mirror_now_.memory != nullptr;
  // After our end no byte of ours goes anywhere: a refusal lets the peer free its new ring at once.
  bool fits = size <= (uint64_t{1} << options.max_peer_ring_size_log2);
  if (ending || !fits || previous_mirror_needed(flow, ledger)) {
    flow.decline_ring_offer();
    return;
  }
  // No byte of ours is read from the mirror before the last move any more: it goes, and the one we
  // write into now becomes the one before this move.
  StreamLink::free_region(mirror_before_);
  StreamLink::Region next{};
  if (!back_home) {
    PinReservation pin = PinReservation::for_growth(static_cast<uint32_t>(std::countr_zero(size)));  // the mirror
    if ((uint64_t{1} << pin.choice().ring_log2) != size ||
        (next = registered(pd, size, false)).memory == nullptr) {
      flow.decline_ring_offer();
      return;
    }
  }
  mirror_before_ = mirror_now_;
  mirror_now_ = next;
  flow.adopt_ring_offer();  // no data goes until the update announcing it is posted
  *peer_rkey = offered_peer_rkey_;
}

void RingGrowth::settle(FlowControl& flow, const SentLedger& ledger) {
  // Our side as the reader: a refused offer's ring goes; after an adopted one, the old ring goes once
  // every byte the peer put there is read (the first ring stays: our mailbox is after it).
  if (flow.ring_declined()) {
    if (offered_ring_.memory != nullptr && offered_gen_ == flow.offered_ring_gen()) {
      StreamLink::free_region(offered_ring_);
    }
    // A larger ring refused: not that size again (the peer will not mirror it, or could not pin it),
    // half of it at most. A smaller one (our first, look_idle) is offered again at a later idle look.
    if (flow.offered_ring_size() > flow.our_ring_size()) {
      grow_limit_log2_ = static_cast<uint32_t>(std::countr_zero(flow.offered_ring_size())) - 1;
    }
    flow.on_offer_declined_done();
  }
  if (flow.ring_retirable()) {
    bool grew = flow.offered_ring_size() > flow.our_ring_size();
    flow.on_old_ring_retired();
    // The old ring goes (unless it was the first); the offered one, if any, is the ring now.
    StreamLink::free_region(grown_ring_);
    if (offered_ring_.memory != nullptr && offered_gen_ == flow.our_ring_gen()) {
      grown_ring_ = offered_ring_;
      grown_gen_ = offered_gen_;
      offered_ring_ = StreamLink::Region{};
    }
    if (grew) {
      ++rings_grown_;
    } else {
      ++rings_shrunk_;
      grow_again_at_ = flow.produced();  // bulk again may grow it again at once
      windows_filled_ = 0;
    }
  }
  // Our side as the writer: the grown mirror of before our last move, once no byte of ours needs it.
  if (mirror_before_.memory != nullptr && !previous_mirror_needed(flow, ledger)) {
    StreamLink::free_region(mirror_before_);
  }
}

RingGrowth::Mirror RingGrowth::current(const FlowControl& flow, StreamLink::Region first, uint64_t peer_first_size) const {
  return mirror_now_.memory != nullptr ? Mirror{mirror_now_.memory, mirror_now_.mr, flow.peer_ring_size()}
                                       : Mirror{first.memory, first.mr, peer_first_size};
}

RingGrowth::Mirror RingGrowth::at(uint64_t cursor, const FlowControl& flow, StreamLink::Region first,
                                  uint64_t peer_first_size) const {
  bool before_move = flow.peer_ring_gen() != 0 && behind(cursor, flow.moved_at());
  if (!before_move) return current(flow, first, peer_first_size);
  // Before the last move: the mirror we wrote into then (the first, unless it was a grown one).
  return mirror_before_.memory != nullptr ? Mirror{mirror_before_.memory, mirror_before_.mr, flow.previous_peer_ring_size()}
                                          : Mirror{first.memory, first.mr, flow.previous_peer_ring_size()};
}

}  // namespace tcp2rdma::transport
