#include "flow_control.h"

#include <algorithm>

namespace tcp2rdma::transport {
const char* to_string(FlowError e) {
  switch (e) {
    case FlowError::kNone: return "none";
    case FlowError::kConsumedBackwards: return "its consumed cursor went back";
    case FlowError::kConsumedUnsent: return "it claims to have consumed bytes never sent";
    case FlowError::kPostedBackwards: return "its posted-receive count went back";
    case FlowError::kPostedBeyondQueue: return "more receives than its queue holds";
    case FlowError::kArmedBackwards: return "its arm count went back";
    case FlowError::kRingOverrun: return "data beyond the ring space advertised";
    case FlowError::kEmptyData: return "a data message of zero bytes";
    case FlowError::kNoReceive: return "a message beyond the receives advertised";
    case FlowError::kUnexpectedWakeup: return "a wakeup for an arm never made";
    case FlowError::kDuplicateClose: return "a second close";
    case FlowError::kDataAfterClose: return "data after its close or its move to TCP";
    case FlowError::kDuplicateMove: return "a second move to TCP";
    case FlowError::kDuplicateRelease: return "a second release";
    case FlowError::kReleaseWithoutEnd: return "a release before its end";
    case FlowError::kAfterRelease: return "a message after its release";
    case FlowError::kBadRingOffer: return "a ring offer out of turn or of a size not agreed";
    case FlowError::kBadRingMove: return "a ring move it cannot have made";
    case FlowError::kAcrossRingMove: return "data across its move to another ring";
  }
  return "?";
}

FlowControl::FlowControl(const FlowConfig& config)
    : config_(config),
      sent_(config.our_first_byte),
      peer_ring_size_(config.peer_ring_size),
      peer_consumed_(config.our_first_byte),
      peer_posted_(config.peer_posted),
      produced_(config.peer_first_byte),
      consumed_(config.peer_first_byte),
      posted_(config.our_posted),
      ring_size_(config.our_ring_size),
      offered_size_(config.our_ring_size),
      last_update_{config.peer_first_byte, config.our_posted, 0, config.our_first_byte, config.peer_posted} {
  last_update_.ring_size = config.our_ring_size;
}

bool FlowControl::may_send_wakeup() const {
  if (!wakeup_owed() || release_sent_ || credits() < 1) return false;
  // Ring space freed since the peer looked: what a writer blocked on our ring waits for.
  if (last_update_.consumed != peer_seen_consumed_) return true;
  // A larger ring offered in the update already out: room too, and a mailbox write wakes nobody (the
  // writer would sleep on its offer while our application, waiting to write, reads nothing).
  if (offer_open_ && !answer_known_ && last_update_.ring_gen == offer_gen_) return true;
  // Receives: news only when they let the peer send data again and what it had seen did not. Any
  // reposted receive is not: the arm's own, reposted, gives back only what the arm took, and
  // answering it would make a peer blocked on our ring arm again at once; two writers blocked on
  // each other's rings then woke each other for ever (about 100 000 messages a second on rxe).
  return peer_credits(last_update_.posted) >= kDataCredits && peer_credits(peer_seen_posted_) < kDataCredits;
}

uint64_t FlowControl::data_room(uint64_t want) const {
  if (credits() < kDataCredits || release_sent_) return 0;  // the last two credits are for signalling
  return append_room(want);
}

uint64_t FlowControl::append_room(uint64_t want) const {
  if (release_sent_) return 0;
  // A ring adopted but not yet announced: the peer must learn where our bytes go before they come.
  if (last_update_.moved_gen != moved_gen_) return 0;
  // After a move to a smaller ring more may be unread than the new ring holds: nothing fits yet.
  uint64_t in_flight = sent_ - peer_consumed_;
  if (in_flight >= peer_ring_size_) return 0;
  uint64_t to_ring_end = peer_ring_size_ - peer_ring_offset();
  return std::min({want, peer_ring_size_ - in_flight, to_ring_end});
}

void FlowControl::adopt_ring_offer() {
  answered_peer_gen_ = adopted_peer_gen_ = offered_peer_gen_;
  moved_gen_ = offered_peer_gen_;
  moved_at_ = sent_;
  previous_peer_ring_size_ = peer_ring_size_;
  peer_ring_size_ = offered_peer_size_;
}

void FlowControl::decline_ring_offer() {
  answered_peer_gen_ = offered_peer_gen_;
  moved_gen_ = offered_peer_gen_ | kRingDeclined;
}

bool FlowControl::may_offer_ring() const {
  return !offer_open_ && !peer_closed_ && !peer_moved_ && !peer_released_ && !release_sent_;
}

uint64_t FlowControl::offer_ring(uint64_t size) {
  offered_size_ = size;
  offer_open_ = true;
  answer_known_ = declined_ = false;
  return ++offer_gen_;
}

uint64_t FlowControl::ring_size_at(uint64_t cursor) const {
  bool moved = ring_adopted();
  return moved && !behind(cursor, peer_moved_at_) ? offered_size_ : ring_size_;
}

RingSpan FlowControl::span_at(uint64_t cursor) const {
  bool moved = ring_adopted();
  bool in_new = moved && !behind(cursor, peer_moved_at_);
  uint64_t size = in_new ? offered_size_ : ring_size_;
  uint64_t offset = cursor & (size - 1);
  uint64_t length = std::min(produced_ - cursor, size - offset);
  if (moved && !in_new) length = std::min(length, peer_moved_at_ - cursor);
  return {in_new ? offer_gen_ : ring_gen_, offset, length};
}

bool FlowControl::ring_retirable() const {
  return ring_adopted() && !behind(consumed_, peer_moved_at_);
}

void FlowControl::on_old_ring_retired() {
  ring_gen_ = offer_gen_;
  ring_size_ = offered_size_;
  offer_open_ = answer_known_ = false;
}

void FlowControl::on_offer_declined_done() { offer_open_ = answer_known_ = declined_ = false; }

// The peer's offer of a ring for our stream: the next generation, only once it knows our answer to the
// previous one, of a possible size; a generation once offered never changes.
FlowError FlowControl::check_ring_offer(const MailboxUpdate& update) {
  if (update.ring_gen == offered_peer_gen_) {
    return offered_peer_gen_ != 0 && update.ring_size != offered_peer_size_ ? FlowError::kBadRingOffer : FlowError::kNone;
  }
  uint64_t size = update.ring_size;
  bool power_of_two = size != 0 && (size & (size - 1)) == 0;
  if (update.ring_gen != offered_peer_gen_ + 1 || ring_offer_pending() || last_update_.moved_gen != moved_gen_ ||
      !power_of_two || size < kSmallestRing || size > kLargestRing) {
    return FlowError::kBadRingOffer;
  }
  return FlowError::kNone;
}

// The peer's answer to our offer: to the one under way, announced, and once read it never changes. An
// adoption's point cannot be before bytes we counted in the old ring (the mailbox is read before every
// data message while the answer is awaited), nor beyond what the old ring let it write.
FlowError FlowControl::check_ring_answer(const MailboxUpdate& update) {
  if (update.moved_gen == peer_answer_) {
    bool adopted = update.moved_gen != 0 && (update.moved_gen & kRingDeclined) == 0;
    return adopted && update.moved_at != peer_moved_at_ ? FlowError::kBadRingMove : FlowError::kNone;
  }
  if ((update.moved_gen & ~kRingDeclined) != offer_gen_ || !offer_open_ || answer_known_ ||
      last_update_.ring_gen != offer_gen_) {
    return FlowError::kBadRingMove;
  }
  if ((update.moved_gen & kRingDeclined) == 0 &&
      (behind(update.moved_at, produced_) || update.moved_at - last_update_.consumed > ring_size_)) {
    return FlowError::kBadRingMove;
  }
  return FlowError::kNone;
}

void FlowControl::on_data_sent(uint64_t bytes) {
  sent_ += bytes;
  ++used_;
}

uint64_t FlowControl::on_wakeup_sent() {
  answered_armed_ = peer_armed_;
  ++used_;
  return answered_armed_;
}

FlowError FlowControl::on_peer_mailbox(const MailboxUpdate& update) {
  if (behind(update.consumed, peer_consumed_)) return FlowError::kConsumedBackwards;
  if (update.consumed - peer_consumed_ > sent_ - peer_consumed_) return FlowError::kConsumedUnsent;
  if (behind(update.posted, peer_posted_)) return FlowError::kPostedBackwards;
  if (update.posted - used_ > config_.peer_queue_depth) return FlowError::kPostedBeyondQueue;
  if (behind(update.armed, peer_armed_)) return FlowError::kArmedBackwards;
  if (FlowError e = check_ring_offer(update); e != FlowError::kNone) return e;
  if (FlowError e = check_ring_answer(update); e != FlowError::kNone) return e;
  if (update.ring_gen != offered_peer_gen_) {
    offered_peer_gen_ = update.ring_gen;
    offered_peer_size_ = update.ring_size;
  }
  if (update.moved_gen != peer_answer_) {
    peer_answer_ = update.moved_gen;
    answer_known_ = true;
    declined_ = (update.moved_gen & kRingDeclined) != 0;
    peer_moved_at_ = update.moved_at;
  }
  peer_consumed_ = update.consumed;
  peer_posted_ = update.posted;
  if (update.armed != peer_armed_) {
    peer_seen_consumed_ = update.seen_consumed;
    peer_seen_posted_ = update.seen_posted;
  }
  peer_armed_ = update.armed;
  return FlowError::kNone;
}

FlowError FlowControl::on_data_arrived(uint64_t bytes) {
  if (peer_released_) return FlowError::kAfterRelease;
  if (!receive_advertised()) return FlowError::kNoReceive;
  ++arrived_;
  if (peer_closed_ || peer_moved_) return FlowError::kDataAfterClose;
  if (bytes == 0) return FlowError::kEmptyData;
  // A peer that moved rings wrote everything before its move point into the old ring and nothing
  // after it: no message straddles the point.
  bool moved = ring_adopted();
  if (moved && behind(produced_, peer_moved_at_) && bytes > peer_moved_at_ - produced_) return FlowError::kAcrossRingMove;
  // The peer may use only the space we advertised: our consumed cursor as of our last update, in the
  // ring its bytes go to (after a move to a smaller ring, possibly none yet).
  uint64_t size = ring_size_at(produced_);
  uint64_t unread = produced_ - last_update_.consumed;
  if (unread >= size || bytes > size - unread) return FlowError::kRingOverrun;
  produced_ += bytes;
  return FlowError::kNone;
}

FlowError FlowControl::on_wakeup_arrived(uint64_t armed_low) {
  if (peer_released_) return FlowError::kAfterRelease;
  if (!receive_advertised()) return FlowError::kNoReceive;
  ++arrived_;
  if (!armed() || (armed_ & kWakeupCountMask) != armed_low) return FlowError::kUnexpectedWakeup;
  answered_by_peer_ = armed_;
  return FlowError::kNone;
}

FlowError FlowControl::on_arm_arrived() {
  if (peer_released_) return FlowError::kAfterRelease;
  if (!receive_advertised()) return FlowError::kNoReceive;
  ++arrived_;
  return FlowError::kNone;
}

FlowError FlowControl::on_close_arrived() {
  if (peer_released_) return FlowError::kAfterRelease;
  if (!receive_advertised()) return FlowError::kNoReceive;
  ++arrived_;
  if (peer_closed_) return FlowError::kDuplicateClose;
  if (peer_moved_) return FlowError::kDataAfterClose;
  peer_closed_ = true;
  return FlowError::kNone;
}

FlowError FlowControl::on_move_arrived() {
  if (peer_released_) return FlowError::kAfterRelease;
  if (!receive_advertised()) return FlowError::kNoReceive;
  ++arrived_;
  if (peer_moved_) return FlowError::kDuplicateMove;
  peer_moved_ = true;
  return FlowError::kNone;
}

FlowError FlowControl::on_release_arrived(bool peer_aborted) {
  if (peer_released_) return FlowError::kDuplicateRelease;
  // Without an end before it, a release would be a peer that stops without a word taken for a clean
  // end; but once ours went (our application closed), nothing of ours reads the channel: the peer's
  // release answers it, whatever end of its own was still owed for want of a credit.
  if (!peer_closed_ && !peer_moved_ && !peer_aborted && !release_sent_) return FlowError::kReleaseWithoutEnd;
  peer_released_ = true;
  return FlowError::kNone;
}

FlowError FlowControl::on_close_release_arrived() {
  if (peer_released_) return FlowError::kDuplicateRelease;
  if (peer_closed_) return FlowError::kDuplicateClose;
  if (peer_moved_) return FlowError::kDataAfterClose;
  peer_closed_ = true;
  peer_released_ = true;
  return FlowError::kNone;
}

bool FlowControl::update_due() const {
  if (release_sent_) return false;  // we write nothing more into the peer's memory
  if (armed_ != last_update_.armed) return true;
  // An offer, or our answer to the peer's, is news the other side waits for.
  if (offer_gen_ != last_update_.ring_gen || moved_gen_ != last_update_.moved_gen) return true;
  // After the peer's end (close, or "to TCP") it sends nothing that needs our credit (its marker after
  // a close uses the receive it kept back): an update would only race its queue pair's destruction
  // and fail its retries at a peer that is gone.
  if (peer_closed_ || peer_moved_) return false;
  uint64_t freed_bytes = consumed_ - last_update_.consumed;
  uint64_t new_receives = posted_ - last_update_.posted;
  if (freed_bytes == 0 && new_receives == 0) return false;
  if (wakeup_owed()) return true;  // the peer waits: tell it at once, then wake it
  return freed_bytes >= ring_size_at(consumed_) / 4 || new_receives >= receive_batch(config_.our_queue_depth);
}

uint64_t FlowControl::receive_batch(uint64_t depth) {
  // A quarter of the receive queue, and at least two receives: at depth 4 (a link's channels past its
  // deep ones) a quarter was one, an update for every message. At most the data messages the peer
  // can have in flight (it keeps two credits back): it must not wait for an update that waits for
  // its next message (an armed peer is told at once all the same).
  uint64_t in_flight = depth > 2 ? depth - 2 : 1;
  return std::max<uint64_t>(1, std::min<uint64_t>(std::max<uint64_t>(2, depth / 4), in_flight));
}

MailboxUpdate FlowControl::make_update() {
  last_update_ = {consumed_, posted_, armed_, peer_consumed_, peer_posted_, offer_gen_, offered_size_, moved_gen_, moved_at_};
  return last_update_;
}

}  // namespace tcp2rdma::transport
