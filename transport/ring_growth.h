// Rings that grow and shrink (docs/links.md, "Rings that grow and shrink"): a channel may start with a
// small receive ring, move to the rule's size when the peer's bytes fill it while the peer waits for
// room, and go back to the first ring when the peer has been idle a while: pinned memory follows the
// bytes in flight, not the connections that once carried bulk. The rules of a move are flow
// control's (flow_control.h, "Ring moves"); here is the memory beyond the channel's first ring and
// mirror: the reader's grown and offered rings, the writer's mirrors of the peer's grown rings (the
// bounce buffer mirrors the ring it writes into, for copies and for a failover's resend), and when
// each is offered, adopted and freed.
//
// The reader keeps its first ring for the channel's life (its mailbox, and for a link's first channel
// the link's setup area, live after it), and besides it at most the grown ring in use and one
// offered. The writer keeps its first mirror likewise, and besides it at most the grown mirror it
// writes into and the one before its last move: an offer that comes while bytes before the last
// move may still be needed from the previous mirror is declined, and the reader may offer again.
//
// The channel owns one and uses it with its link's lock held; the first ring and mirror stay the
// channel's, passed in where a call needs them.
#pragma once

#include <array>
#include <cstdint>

#include "stream_link.h"

namespace tcp2rdma::transport {

class FlowControl;
class SentLedger;
struct StreamOptions;

class RingGrowth {
 public:
  // Where a byte of ours is mirrored, and the size of the peer's ring it went to.
  struct Mirror {
    uint8_t* base;
    ibv_mr* mr;
    uint64_t size;
  };

  // The channel started, the peer's cursor at `peer_cursor`: no try to grow before bytes come.
  void start(uint64_t peer_cursor) { grow_again_at_ = peer_cursor; }
  // The peer filled all the room we had advertised (its last message of a full window).
  void note_window_filled() { ++windows_filled_; }
  // The rkey of the ring the peer offers (its mailbox), used once flow control adopts the offer.
  void note_offered_rkey(uint32_t rkey) { offered_peer_rkey_ = rkey; }

  // The reader's side. The peer filled our ring and waits for room, or carries bulk: offers it a
  // ring of the rule's size if the budget allows (the offer goes out with our next mailbox update).
  void maybe_grow(FlowControl& flow, const StreamOptions& options, ibv_pd* pd);
  // A periodic look (the path watcher's, a blocked call's keepalive): our grown ring idle since the
  // last look and empty, the first ring (of `first_size` bytes) is offered again. True when it was:
  // the caller sends the update that carries the offer.
  bool look_idle(FlowControl& flow, const StreamOptions& options, uint64_t first_size);
  // Our registration of ring generation `gen`: the offered ring, the grown one in use, or `first`.
  StreamLink::Region ring(uint64_t gen, StreamLink::Region first) const {
    if (offered_ring_.memory != nullptr && gen == offered_gen_) return offered_ring_;
    if (grown_ring_.memory != nullptr && gen == grown_gen_) return grown_ring_;
    return first;
  }

  // The writer's side. Answers the peer's offer: adopted with a mirror for it, or declined (`ending`:
  // our sending side is over, so no byte of ours needs it). `peer_first_size`: the peer's first
  // ring's, which our first mirror keeps. An adopted offer sets *peer_rkey to the new ring's.
  void answer_offer(FlowControl& flow, const StreamOptions& options, const SentLedger& ledger, ibv_pd* pd,
                    uint64_t peer_first_size, bool ending, uint32_t* peer_rkey);
  // Bytes of ours before the last move may still be read from the previous mirror.
  bool previous_mirror_needed(const FlowControl& flow, const SentLedger& ledger) const;
  // The mirror of the ring we write into now (`first`, of the peer's first ring, when not grown).
  Mirror current(const FlowControl& flow, StreamLink::Region first, uint64_t peer_first_size) const;
  // Where our byte at `cursor` is mirrored.
  Mirror at(uint64_t cursor, const FlowControl& flow, StreamLink::Region first, uint64_t peer_first_size) const;

  // Both sides: frees what a finished move left (our old ring, a declined offer's ring, a mirror no
  // byte of ours needs any more).
  void settle(FlowControl& flow, const SentLedger& ledger);
  // What the channel leaves its link when it goes (StreamLink::Retired::grown).
  std::array<StreamLink::Region, 4> leftovers() const { return {grown_ring_, offered_ring_, mirror_now_, mirror_before_}; }

  // Times our ring moved to a larger one, and back to its first size.
  uint64_t grown() const { return rings_grown_; }
  uint64_t shrunk() const { return rings_shrunk_; }

 private:
  // Our grown ring the peer writes into now and a larger one offered, each with its generation
  // (none: the first ring); the peer's offered ring's rkey; the mirror of the peer's grown ring we
  // write into now (none: the first mirror), and the grown mirror we wrote into before our last
  // move, kept while a byte of ours may still be read from it.
  StreamLink::Region grown_ring_, offered_ring_;
  uint64_t grown_gen_ = 0, offered_gen_ = 0;
  uint32_t offered_peer_rkey_ = 0;
  StreamLink::Region mirror_now_, mirror_before_;
  uint64_t rings_grown_ = 0;
  uint64_t rings_shrunk_ = 0;
  // Times the peer wrote all the room we had advertised (note_window_filled): this many say bulk.
  static constexpr uint64_t kBulkWindows = 2;
  uint64_t windows_filled_ = 0;
  uint64_t idle_mark_ = 0;      // the peer's cursor at the last periodic look (look_idle)
  bool idle_marked_ = false;    // idle_mark_ was taken while our grown ring was the ring
  uint32_t grow_limit_log2_ = 30;  // lowered when the peer refuses a size
  uint64_t grow_again_at_ = 0;     // the peer's cursor before which no new try to grow is made
};

}  // namespace tcp2rdma::transport
