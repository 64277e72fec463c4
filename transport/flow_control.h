// Flow control of one stream, as pure logic: no verbs, no clocks, no allocation (docs/protocol.md,
// "Flow control"). One instance per connection, on each side; it answers "may I post this?" and
// "must I tell the peer?", and validates everything the peer says.
//
// Cursors are 64-bit counts that start anywhere and wrap modulo 2^64: only differences are compared.
#pragma once

#include <cstdint>

namespace tcp2rdma::transport {

// Cursor a is before cursor b: as a signed distance, since cursors wrap modulo 2^64 and are never 2^63
// apart.
inline bool behind(uint64_t a, uint64_t b) { return static_cast<int64_t>(a - b) < 0; }

enum class FlowError {
  kNone,
  kConsumedBackwards,   // the peer's consumed cursor went back
  kConsumedUnsent,      // the peer claims to have consumed bytes we never sent
  kPostedBackwards,     // the peer's posted-receive total went back
  kPostedBeyondQueue,   // more receives outstanding than the peer's receive queue holds
  kArmedBackwards,      // the peer's arm count went back
  kRingOverrun,         // data beyond the ring space we had advertised as free
  kEmptyData,           // a data message of zero bytes
  kNoReceive,           // a message arrived with no receive of ours left for it
  kUnexpectedWakeup,    // a wakeup answering an arm count we never set
  kDuplicateClose,      // a second close
  kDataAfterClose,      // data after the peer's close or its move to TCP
  kDuplicateMove,       // a second "to TCP"
  kDuplicateRelease,    // a second release
  kReleaseWithoutEnd,   // a release before the peer's close, abort or "to TCP"
  kAfterRelease,        // a message after the peer's release
  kBadRingOffer,        // a ring offer out of turn, of an impossible size, or changed once made
  kBadRingMove,         // an answer to an offer we never made, or a move point it cannot have
  kAcrossRingMove,      // a data message that runs past the point where the peer moved rings
};

const char* to_string(FlowError e);

// What one side writes into the peer's mailbox.
struct MailboxUpdate {
  uint64_t consumed;       // bytes of the peer's stream our application has consumed
  uint64_t posted;         // receives we have posted, in total
  uint64_t armed;          // our arm count: we wait for a wakeup answering it
  uint64_t seen_consumed;  // with an arm: the peer's `consumed` as we last read it
  uint64_t seen_posted;    // with an arm: the peer's `posted` as we last read it
  // Ring moves (docs/links.md, "Rings that grow and shrink"). Our latest offer of a ring for the
  // peer's stream (0: none since setup) and its size; the transport sends the ring's rkey beside it.
  uint64_t ring_gen = 0;
  uint64_t ring_size = 0;
  // Our answer to the peer's latest offer (0: none yet; kRingDeclined set: declined) and, adopted, the
  // cursor of our stream from which we write into the offered ring.
  uint64_t moved_gen = 0;
  uint64_t moved_at = 0;
};
inline constexpr uint64_t kRingDeclined = uint64_t{1} << 63;

struct FlowConfig {
  uint64_t peer_ring_size;       // ring we write into (power of two)
  uint64_t our_first_byte;       // our stream's starting cursor (what the peer consumed initially)
  uint64_t peer_posted;          // receives the peer had posted at setup
  uint64_t peer_queue_depth;     // bound on the peer's outstanding receives
  uint64_t our_ring_size;        // ring the peer writes into (power of two)
  uint64_t peer_first_byte;      // the peer's stream's starting cursor
  uint64_t our_posted;           // receives we posted at setup
  uint64_t our_queue_depth;
};

// The sizes a ring may have (wire.h: 2^10 to 2^30). Within them an offer is the writer's to decline
// (its bounce buffer mirrors the ring it writes into: a size it will not pin), never a violation.
inline constexpr uint64_t kSmallestRing = uint64_t{1} << 10;
inline constexpr uint64_t kLargestRing = uint64_t{1} << 30;

// Where the next bytes of the peer's stream are in our memory: `length` contiguous bytes at `offset`
// of ring generation `gen` (0: the ring of the setup).
struct RingSpan {
  uint64_t gen;
  uint64_t offset;
  uint64_t length;
};

class FlowControl {
 public:
  explicit FlowControl(const FlowConfig& config);

  // --- Sending (our stream into the peer's ring) ---
  // Bytes that may go in one data message now: within the free ring space, up to the ring's end (one
  // RDMA Write is contiguous), and zero unless three receive credits are left: two stay back, for an
  // arm and for a wakeup or close, so that signalling never waits on data credits.
  uint64_t data_room(uint64_t want) const;
  static constexpr uint64_t kDataCredits = 3;  // a data message needs this many credits left
  uint64_t peer_ring_offset() const { return sent_ & (peer_ring_size_ - 1); }
  void on_data_sent(uint64_t bytes);
  // A message whose credit is taken (on_data_sent) and that is not posted yet may grow by the bytes
  // that follow it in the ring (the transport holds it while the application says more follows):
  // within the free ring space and up to the ring's end, no further credit. Zero while a ring
  // adopted is not announced (the message would have to straddle the move).
  uint64_t append_room(uint64_t want) const;
  void on_data_appended(uint64_t bytes) { sent_ += bytes; }

  // --- Ring moves, the writer's side: the peer offers a new ring for our stream in its mailbox
  // update (on_peer_mailbox checks it). We adopt it at our cursor now, after which every byte goes
  // into the new ring (and no data goes until the update announcing it is posted: the peer must
  // read where our bytes are before it finds them), or decline it (we cannot mirror it).
  bool ring_offer_pending() const { return offered_peer_gen_ != answered_peer_gen_; }
  uint64_t offered_peer_ring_size() const { return offered_peer_size_; }
  void adopt_ring_offer();
  void decline_ring_offer();
  uint64_t peer_ring_gen() const { return adopted_peer_gen_; }  // the ring we write into now
  uint64_t peer_ring_size() const { return peer_ring_size_; }
  // The last adopted move: bytes of ours before `moved_at` went into the previous ring (of
  // `previous_peer_ring_size`), the rest into the current one. 0 generations: never moved.
  uint64_t moved_at() const { return moved_at_; }
  uint64_t previous_peer_ring_size() const { return previous_peer_ring_size_; }

  // A wakeup is owed when the peer armed with a count we have not answered. It is sent once we have
  // advertised something the peer can use that it had not seen when it armed: ring space we
  // consumed, or receives that give it the credits for data it lacked (so the woken peer finds
  // something; until then a wakeup would only make it arm again). Its receive is the one we kept
  // back; on_wakeup_sent returns the count it answers.
  bool wakeup_owed() const { return peer_armed_ != answered_armed_; }
  bool may_send_wakeup() const;
  uint64_t on_wakeup_sent();

  bool may_send_close() const { return !close_sent_ && !release_sent_ && credits() >= 1; }
  void on_close_sent() { close_sent_ = true; ++used_; }
  // "To TCP" may follow a close (the peer still has to learn that our side moved).
  bool may_send_move() const { return !release_sent_ && credits() >= 1; }
  void on_move_sent() { ++used_; }

  // The release (docs/links.md, "Ending a channel"): the last message of a side on a channel, after
  // its end (close, abort or "to TCP"), saying that it writes nothing more into the peer's memory of
  // the channel (its ring and mailbox), so that the peer may free it and, once both sides released,
  // give the channel's index to another stream. It uses a receive outside this flow control: each
  // channel's receive queue quota holds one more receive than its depth, kept for the release alone,
  // so that a release never waits for a credit (a side that has released sends no more updates).
  bool may_send_release() const { return !release_sent_; }
  void on_release_sent() { release_sent_ = true; }
  // Our close and release in one, on the release's receive (wire.h, kEndCloseRelease): no credit.
  bool may_send_close_release() const { return !close_sent_ && !release_sent_; }
  void on_close_release_sent() {
    close_sent_ = true;
    release_sent_ = true;
  }
  bool release_sent() const { return release_sent_; }

  // The peer's mailbox update, read from our mailbox.
  FlowError on_peer_mailbox(const MailboxUpdate& update);

  // --- Receiving (the peer's stream in our ring) ---
  FlowError on_data_arrived(uint64_t bytes);
  // A wakeup names the arm it answers by the count's low 16 bits (the immediate's argument, wire.h):
  // one arm is outstanding at a time, so they tell it exactly.
  static constexpr uint64_t kWakeupCountMask = 0xffff;
  FlowError on_wakeup_arrived(uint64_t armed_low);
  FlowError on_arm_arrived();  // the peer's arm message; its count comes with the mailbox update
  FlowError on_close_arrived();
  FlowError on_move_arrived();  // the peer's "to TCP": nothing more comes on the stream
  // The peer's release, on its reserved receive (not counted against the advertised ones). The peer
  // must have ended first: a release says nothing more is written, and a stream that simply stops
  // without an end must read as a reset, never as a clean end. Unless our release went first: then
  // nothing of ours reads the stream, and the peer's release only answers ours.
  FlowError on_release_arrived(bool peer_aborted);
  // The peer's close and release in one, on the same reserved receive: its end, then its release.
  FlowError on_close_release_arrived();
  bool peer_released() const { return peer_released_; }
  uint64_t readable() const { return produced_ - consumed_; }
  // The peer's stream is here up to `produced` (arrived), and read by our application up to `consumed`.
  uint64_t produced() const { return produced_; }
  uint64_t consumed() const { return consumed_; }
  uint64_t our_ring_offset() const { return consumed_ & (ring_size_at(consumed_) - 1); }
  // The bytes read() may take next, contiguous in one ring: up to that ring's end, and never past the
  // point where the peer moved to another ring.
  RingSpan read_span() const { return span_at(consumed_); }
  // The same from `cursor` (between consumed and produced): for a peek past what it already copied.
  RingSpan span_at(uint64_t cursor) const;
  // The most the peer may have written past our consumed cursor: the larger ring while a move is
  // under way (a failover's check of where the peer says its stream ends).
  uint64_t ring_window() const { return offer_open_ && offered_size_ > ring_size_ ? offered_size_ : ring_size_; }

  // --- Ring moves, the reader's side: we offer the peer a ring of another size for its stream (the
  // transport has made it); the offer travels in our next mailbox update. The peer answers in its
  // own: adopted from its cursor `moved_at`, or declined. Adopted, the old ring holds the bytes
  // before moved_at: it may go once they are consumed (ring_retirable), then the new one is the ring.
  bool may_offer_ring() const;
  // The peer has written all the room we advertised: it is faster than our application's reading.
  bool window_full() const { return produced_ - last_update_.consumed >= ring_size_; }
  // Our ring holds nothing our application has read: no update of ours could give the peer room.
  // The peer cannot write a byte more: unread bytes fill the ring it writes into (the offered one
  // once it adopted it, however many bytes are still in the old one).
  bool ring_full() const { return produced_ - consumed_ >= (ring_adopted() ? offered_size_ : ring_size_); }
  uint64_t offer_ring(uint64_t size);  // returns the offer's generation
  uint64_t our_ring_size() const { return ring_size_; }
  uint64_t our_ring_gen() const { return ring_gen_; }
  uint64_t offered_ring_size() const { return offered_size_; }
  uint64_t offered_ring_gen() const { return offer_gen_; }
  bool ring_offered() const { return offer_open_; }
  // Offered, and the peer's answer not read yet: a larger ring may be on its way.
  bool ring_offer_unanswered() const { return offer_open_ && !answer_known_; }
  // The peer's answer is not known yet although it may have been given: our mailbox must be read
  // before a data message is counted (its bytes may already be in the offered ring).
  bool ring_answer_awaited() const { return offer_open_ && last_update_.ring_gen == offer_gen_ && !answer_known_; }
  bool ring_declined() const { return offer_open_ && answer_known_ && declined_; }
  // Offered and adopted: the peer's bytes from its move on go into the offered ring.
  bool ring_adopted() const { return offer_open_ && answer_known_ && !declined_; }
  bool ring_retirable() const;
  // The declined offer is over (the transport freed its ring), or the old ring is retired.
  void on_offer_declined_done();
  void on_old_ring_retired();
  bool peer_closed() const { return peer_closed_; }
  bool peer_moved() const { return peer_moved_; }
  void on_app_consumed(uint64_t bytes) { consumed_ += bytes; }
  uint64_t receives_to_repost() const { return arrived_ - (posted_ - config_.our_posted); }
  void on_reposted(uint64_t n) { posted_ += n; }

  // Blocked: ask the peer for a wakeup. The arm is a mailbox update (carrying the new count and what
  // we have seen) followed by an arm message, which raises a completion: the peer may be asleep.
  // Only with no arm outstanding and every consumed receive reposted, so that the update also
  // restores the receive the peer's wakeup will use.
  bool may_arm() const {
    return !release_sent_ && armed_ == answered_by_peer_ && receives_to_repost() == 0 && credits() >= 1;
  }
  void arm() { ++armed_; }
  void on_arm_sent() { ++used_; }
  uint64_t arm_count() const { return armed_; }
  bool armed() const { return armed_ != answered_by_peer_; }

  // Whether our mailbox update to the peer is due: a quarter of our ring or receive queue freed since
  // the last, or an arm the peer does not know of yet, or the peer is armed and anything was freed;
  // after the peer's end, only a new arm of ours.
  bool update_due() const;
  // How many reposted receives make an update due by themselves, for a receive queue of `depth`.
  static uint64_t receive_batch(uint64_t depth);
  MailboxUpdate make_update();  // records it as sent

  uint64_t sent() const { return sent_; }
  // Where each stream started (the cursors count from there): for counts since the setup.
  uint64_t our_first_byte() const { return config_.our_first_byte; }
  uint64_t peer_first_byte() const { return config_.peer_first_byte; }
  uint64_t peer_consumed() const { return peer_consumed_; }
  uint64_t credits() const { return peer_posted_ - used_; }

 private:
  // The peer may use only the receives we have told it of (our last update), not those we reposted
  // since: anything beyond is a violation even when the hardware happened to have a receive for it.
  bool receive_advertised() const { return arrived_ != last_update_.posted; }
  // The peer's credits if it had seen `posted` of ours: every message it sent that takes one of our
  // receives has arrived once its arm has (RC keeps order), and only wakeups and ends follow an arm.
  uint64_t peer_credits(uint64_t posted) const { return posted - arrived_; }

  // The size of our ring that holds the peer's byte at `cursor`.
  uint64_t ring_size_at(uint64_t cursor) const;
  FlowError check_ring_offer(const MailboxUpdate& update);
  FlowError check_ring_answer(const MailboxUpdate& update);

  FlowConfig config_;
  // sending
  uint64_t sent_;
  uint64_t peer_ring_size_;
  uint64_t offered_peer_gen_ = 0;   // the peer's latest offer
  uint64_t offered_peer_size_ = 0;
  uint64_t answered_peer_gen_ = 0;  // the latest offer we answered (adopted or declined)
  uint64_t adopted_peer_gen_ = 0;
  uint64_t moved_gen_ = 0;          // what our updates say of our answer (with kRingDeclined)
  uint64_t moved_at_ = 0;
  uint64_t previous_peer_ring_size_ = 0;
  uint64_t peer_consumed_;
  uint64_t peer_posted_;
  uint64_t used_ = 0;
  uint64_t peer_armed_ = 0;
  uint64_t answered_armed_ = 0;
  uint64_t peer_seen_consumed_ = 0;  // what the peer had seen of our receiving side when it armed
  uint64_t peer_seen_posted_ = 0;
  bool close_sent_ = false;
  bool release_sent_ = false;
  // receiving
  uint64_t produced_;
  uint64_t consumed_;
  uint64_t posted_;
  uint64_t arrived_ = 0;  // messages that consumed one of our receives
  uint64_t armed_ = 0;
  uint64_t answered_by_peer_ = 0;
  bool peer_closed_ = false;
  bool peer_moved_ = false;
  bool peer_released_ = false;
  uint64_t ring_size_;        // our ring (generation ring_gen_)
  uint64_t ring_gen_ = 0;
  uint64_t offer_gen_ = 0;    // our latest offer
  uint64_t offered_size_;     // its size (before any offer: the first ring's)
  bool offer_open_ = false;   // under way: neither declined nor its old ring retired
  bool answer_known_ = false;  // the peer's answer to offer_gen_ was read
  bool declined_ = false;
  uint64_t peer_answer_ = 0;    // the peer's moved_gen as last read
  uint64_t peer_moved_at_ = 0;  // adopted: the peer's bytes from here are in the offered ring
  MailboxUpdate last_update_;
};

}  // namespace tcp2rdma::transport
