#include "flow_control.h"

#include <algorithm>

namespace tcp2rdma::transport {
namespace {

// a - b as a signed distance: cursors wrap modulo 2^64 and are never 2^63 apart.
bool behind(uint64_t a, uint64_t b) { return static_cast<int64_t>(a - b) < 0; }

}  // namespace

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
  }
  return "?";
}

FlowControl::FlowControl(const FlowConfig& config)
    : config_(config),
      sent_(config.our_first_byte),
      peer_consumed_(config.our_first_byte),
      peer_posted_(config.peer_posted),
      produced_(config.peer_first_byte),
      consumed_(config.peer_first_byte),
      posted_(config.our_posted),
      last_update_{config.peer_first_byte, config.our_posted, 0, config.our_first_byte, config.peer_posted} {}

bool FlowControl::may_send_wakeup() const {
  if (!wakeup_owed() || release_sent_ || credits() < 1) return false;
  // Ring space freed since the peer looked: what a writer blocked on our ring waits for.
  if (last_update_.consumed != peer_seen_consumed_) return true;
  // Receives: news only when they let the peer send data again and what it had seen did not. Any
  // reposted receive is not: the arm's own, reposted, gives back only what the arm took, and
  // answering it would make a peer blocked on our ring arm again at once; two writers blocked on
  // each other's rings then woke each other for ever (about 100 000 messages a second on rxe).
  return peer_credits(last_update_.posted) >= kDataCredits && peer_credits(peer_seen_posted_) < kDataCredits;
}

uint64_t FlowControl::data_room(uint64_t want) const {
  if (credits() < kDataCredits || release_sent_) return 0;  // the last two credits are for signalling
  uint64_t free_bytes = config_.peer_ring_size - (sent_ - peer_consumed_);
  uint64_t to_ring_end = config_.peer_ring_size - peer_ring_offset();
  return std::min({want, free_bytes, to_ring_end});
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
  // The peer may use only the space we advertised: our consumed cursor as of our last update.
  if (bytes > config_.our_ring_size - (produced_ - last_update_.consumed)) return FlowError::kRingOverrun;
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
  if (!peer_closed_ && !peer_moved_ && !peer_aborted) return FlowError::kReleaseWithoutEnd;
  peer_released_ = true;
  return FlowError::kNone;
}

bool FlowControl::update_due() const {
  if (release_sent_) return false;  // we write nothing more into the peer's memory
  if (armed_ != last_update_.armed) return true;
  // After the peer's end (close, or "to TCP") it sends nothing that needs our credit (its marker after
  // a close uses the receive it kept back): an update would only race its queue pair's destruction
  // and fail its retries at a peer that is gone.
  if (peer_closed_ || peer_moved_) return false;
  uint64_t freed_bytes = consumed_ - last_update_.consumed;
  uint64_t new_receives = posted_ - last_update_.posted;
  if (freed_bytes == 0 && new_receives == 0) return false;
  if (wakeup_owed()) return true;  // the peer waits: tell it at once, then wake it
  return freed_bytes >= config_.our_ring_size / 4 || new_receives >= std::max<uint64_t>(1, config_.our_queue_depth / 4);
}

MailboxUpdate FlowControl::make_update() {
  last_update_ = {consumed_, posted_, armed_, peer_consumed_, peer_posted_};
  return last_update_;
}

}  // namespace tcp2rdma::transport
