// Ring moves in flow control (docs/links.md, "Rings that grow and shrink"), as pure logic: the rules
// one by one, then a writer and a reader driven against each other through a simulated queue pair
// with the reader's rings as real memory. Every byte is placed where the writer's flow control says
// and read where the reader's says; the model checks that no write lands in a ring that is gone or on
// a byte not yet read, and that every byte read is the one the writer sent at that cursor.
#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "flow_control.h"

namespace tcp2rdma::transport {
namespace {

constexpr uint64_t kNearWrap = ~uint64_t{0} - 700;

FlowConfig config(uint64_t ring, uint64_t depth, uint64_t a_first, uint64_t b_first) {
  return FlowConfig{ring, a_first, depth, depth, ring, b_first, depth, depth};
}

// A writer W (first cursor kNearWrap) and a reader R (its own stream starts at 5000), 4 KiB rings.
struct Pair {
  FlowControl w{config(4096, 8, kNearWrap, 5000)};
  FlowControl r{config(4096, 8, 5000, kNearWrap)};
  void r_to_w() { ASSERT_EQ(w.on_peer_mailbox(r.make_update()), FlowError::kNone); }
  void w_to_r() { ASSERT_EQ(r.on_peer_mailbox(w.make_update()), FlowError::kNone); }
};

TEST(RingMove, AnAdoptedRingTakesTheBytesFromTheMovePointOn) {
  Pair p;
  p.w.on_data_sent(1000);
  ASSERT_EQ(p.r.on_data_arrived(1000), FlowError::kNone);
  ASSERT_TRUE(p.r.may_offer_ring());
  EXPECT_EQ(p.r.offer_ring(16384), 1u);
  EXPECT_FALSE(p.r.may_offer_ring());  // one at a time
  EXPECT_TRUE(p.r.update_due());
  p.r_to_w();
  EXPECT_TRUE(p.r.ring_answer_awaited());
  ASSERT_TRUE(p.w.ring_offer_pending());
  EXPECT_EQ(p.w.offered_peer_ring_size(), 16384u);
  p.w.adopt_ring_offer();
  EXPECT_EQ(p.w.moved_at(), kNearWrap + 1000);
  EXPECT_EQ(p.w.data_room(100000), 0u);  // not before the peer can learn of the move
  EXPECT_TRUE(p.w.update_due());
  p.w_to_r();
  EXPECT_FALSE(p.r.ring_answer_awaited());
  // The writer may fill the new ring less what the reader has not consumed yet.
  EXPECT_EQ(p.w.data_room(100000), std::min<uint64_t>(16384 - 1000, 16384 - ((kNearWrap + 1000) & 16383)));
  p.w.on_data_sent(3000);
  ASSERT_EQ(p.r.on_data_arrived(3000), FlowError::kNone);
  // The reader finds the 1000 old bytes in the old ring, then the new ones in the new ring.
  RingSpan s = p.r.read_span();
  EXPECT_EQ(s.gen, 0u);
  EXPECT_EQ(s.length, 4096 - (kNearWrap & 4095));  // to the old ring's end
  p.r.on_app_consumed(s.length);
  s = p.r.read_span();
  EXPECT_EQ(s.gen, 0u);
  EXPECT_EQ(s.offset, 0u);
  EXPECT_EQ(s.length, 1000 - (4096 - (kNearWrap & 4095)));  // to the move point
  EXPECT_FALSE(p.r.ring_retirable());
  p.r.on_app_consumed(s.length);
  EXPECT_TRUE(p.r.ring_retirable());
  s = p.r.read_span();
  EXPECT_EQ(s.gen, 1u);
  EXPECT_EQ(s.offset, (kNearWrap + 1000) & 16383);
  p.r.on_old_ring_retired();
  EXPECT_EQ(p.r.our_ring_size(), 16384u);
  EXPECT_EQ(p.r.our_ring_gen(), 1u);
  EXPECT_TRUE(p.r.may_offer_ring());
}

// A writer that waits for room sleeps until a message of ours completes at its end; a mailbox write
// completes nothing there. The offer of a larger ring is the room it waits for, so the reader wakes it
// after the update that carries the offer. Without the wakeup both slept for good when the reader's
// application waited to write too (it reads nothing while the offer is on its way, and no spill is
// made then): integration.inetd_load.pair, an echo stalled 60 s after its switch, once in ten runs.
TEST(RingMove, AnOfferToAWriterThatWaitsForRoomWakesIt) {
  Pair p;
  // W fills R's ring; R's application reads nothing.
  while (uint64_t n = p.w.data_room(100000)) {
    p.w.on_data_sent(n);
    ASSERT_EQ(p.r.on_data_arrived(n), FlowError::kNone);
  }
  p.r.on_reposted(p.r.receives_to_repost());
  // W waits for room, armed: its update, then its arm message.
  ASSERT_TRUE(p.w.may_arm());
  p.w.arm();
  p.w_to_r();
  p.w.on_arm_sent();
  ASSERT_EQ(p.r.on_arm_arrived(), FlowError::kNone);
  p.r.on_reposted(p.r.receives_to_repost());
  ASSERT_TRUE(p.r.wakeup_owed());
  if (p.r.update_due()) p.r_to_w();  // the reposted receives: no room, no news for W
  EXPECT_FALSE(p.r.may_send_wakeup());
  // R offers a larger ring: once the update that carries it is out, W is woken to read it.
  p.r.offer_ring(16384);
  EXPECT_FALSE(p.r.may_send_wakeup()) << "a wakeup before the offer's update would find no news";
  ASSERT_TRUE(p.r.update_due());
  p.r_to_w();
  EXPECT_TRUE(p.r.may_send_wakeup());
  p.r.on_wakeup_sent();
  ASSERT_EQ(p.w.on_wakeup_arrived(p.w.arm_count() & FlowControl::kWakeupCountMask), FlowError::kNone);
  ASSERT_TRUE(p.w.ring_offer_pending());
  p.w.adopt_ring_offer();
  ASSERT_TRUE(p.w.update_due());
  p.w_to_r();
  EXPECT_GT(p.w.data_room(100000), 0u);  // room in the new ring: W writes on
}

TEST(RingMove, ADeclinedOfferLeavesTheRingAsItWas) {
  Pair p;
  p.r.offer_ring(16384);
  p.r_to_w();
  p.w.decline_ring_offer();
  EXPECT_EQ(p.w.data_room(100), 0u);  // the answer goes first
  p.w_to_r();
  EXPECT_TRUE(p.r.ring_declined());
  EXPECT_FALSE(p.r.may_offer_ring());
  p.r.on_offer_declined_done();
  EXPECT_TRUE(p.r.may_offer_ring());
  EXPECT_EQ(p.w.data_room(100), 100u);
  EXPECT_EQ(p.w.peer_ring_size(), 4096u);
  // The next offer is the next generation.
  EXPECT_EQ(p.r.offer_ring(8192), 2u);
  p.r_to_w();
  EXPECT_EQ(p.w.offered_peer_ring_size(), 8192u);
}

TEST(RingMove, AMoveToASmallerRingWaitsForTheUnreadBytes) {
  Pair p;
  p.w.on_data_sent(4000);
  ASSERT_EQ(p.r.on_data_arrived(4000), FlowError::kNone);
  p.r.offer_ring(1024);
  p.r_to_w();
  p.w.adopt_ring_offer();
  p.w_to_r();
  EXPECT_EQ(p.w.data_room(100), 0u);  // 4000 unread: more than the new ring holds
  EXPECT_EQ(p.r.on_data_arrived(1), FlowError::kRingOverrun);
}

// 500 bytes in the reader's first ring, an offer of 8 KiB announced to the writer, and the writer's
// update answering it (adopted; its move point is the caller's to set).
MailboxUpdate answer_after_500_bytes(Pair& p) {
  p.w.on_data_sent(500);
  EXPECT_EQ(p.r.on_data_arrived(500), FlowError::kNone);
  p.r.offer_ring(8192);
  p.r_to_w();
  MailboxUpdate u = p.w.make_update();
  u.moved_gen = 1;
  return u;
}

TEST(RingMove, TheReaderRefusesMovesItCannotHaveMade) {
  {  // an answer to no offer
    Pair p;
    MailboxUpdate u = p.w.make_update();
    u.moved_gen = 1;
    EXPECT_EQ(p.r.on_peer_mailbox(u), FlowError::kBadRingMove);
  }
  {  // a move point before bytes already counted in the old ring
    Pair p;
    MailboxUpdate u = answer_after_500_bytes(p);
    u.moved_at = kNearWrap + 100;
    EXPECT_EQ(p.r.on_peer_mailbox(u), FlowError::kBadRingMove);
    u.moved_at = kNearWrap + 5000;  // beyond what the old ring let it write
    EXPECT_EQ(p.r.on_peer_mailbox(u), FlowError::kBadRingMove);
    u.moved_at = kNearWrap + 500;
    EXPECT_EQ(p.r.on_peer_mailbox(u), FlowError::kNone);
    u.moved_at = kNearWrap + 600;  // and once said it stays
    EXPECT_EQ(p.r.on_peer_mailbox(u), FlowError::kBadRingMove);
  }
  {  // a message across the move point
    Pair p;
    MailboxUpdate u = answer_after_500_bytes(p);
    u.moved_at = kNearWrap + 800;
    ASSERT_EQ(p.r.on_peer_mailbox(u), FlowError::kNone);
    EXPECT_EQ(p.r.on_data_arrived(400), FlowError::kAcrossRingMove);
  }
  {  // an answer before the offer was announced
    Pair p;
    p.r.offer_ring(8192);
    MailboxUpdate u = p.w.make_update();
    u.moved_gen = 1 | kRingDeclined;
    EXPECT_EQ(p.r.on_peer_mailbox(u), FlowError::kBadRingMove);
  }
}

TEST(RingMove, TheWriterRefusesOffersOutOfTurnOrOfImpossibleSizes) {
  auto offer = [](Pair& p, uint64_t gen, uint64_t size) {
    MailboxUpdate u = p.r.make_update();
    u.ring_gen = gen;
    u.ring_size = size;
    return p.w.on_peer_mailbox(u);
  };
  {
    Pair p;
    EXPECT_EQ(offer(p, 2, 8192), FlowError::kBadRingOffer);       // skips a generation
    EXPECT_EQ(offer(p, 1, 3000), FlowError::kBadRingOffer);       // not a power of two
    EXPECT_EQ(offer(p, 1, 512), FlowError::kBadRingOffer);        // below the smallest ring
    EXPECT_EQ(offer(p, 1, uint64_t{1} << 31), FlowError::kBadRingOffer);  // above the largest
    EXPECT_EQ(offer(p, 1, 8192), FlowError::kNone);
    EXPECT_EQ(offer(p, 1, 16384), FlowError::kBadRingOffer);      // changed once made
    EXPECT_EQ(offer(p, 2, 16384), FlowError::kBadRingOffer);      // before our answer
    p.w.adopt_ring_offer();
    EXPECT_EQ(offer(p, 2, 16384), FlowError::kBadRingOffer);      // answered, not yet announced
    p.w.make_update();
    EXPECT_EQ(offer(p, 2, 16384), FlowError::kNone);
  }
}

// ---- A writer and a reader with real rings ----------------------------------------------------------
struct Message {
  enum Kind { kData, kWakeup, kArm, kMailbox } kind;
  uint64_t arg = 0;        // data: length; wakeup: count
  uint64_t gen = 0;        // data: the reader's ring it is written into
  uint64_t offset = 0;
  uint64_t cursor = 0;     // data: the writer's cursor of its first byte
  MailboxUpdate update{};
};

// One ring of the reader: each slot holds the cursor of the byte written there, while unread.
struct Ring {
  std::vector<uint64_t> cursor;
  std::vector<char> full;
  explicit Ring(uint64_t size) : cursor(size), full(size) {}
};

struct End {
  explicit End(const FlowConfig& c) : flow(c) {}
  FlowControl flow;
  std::deque<Message> inbox;
  bool mailbox_pending = false;
  MailboxUpdate mailbox{};
  bool sleeping = false;
};

struct Model {
  Model(uint64_t seed, uint64_t ring, uint64_t depth)
      : rng(seed),
        w(config(ring, depth, kNearWrap - rng() % 3000, 77)),
        r(config(ring, depth, 77, w.flow.sent())) {
    rings.emplace(0, Ring(ring));
  }
  std::mt19937_64 rng;
  End w, r;
  std::map<uint64_t, Ring> rings;  // the reader's, by generation
  uint64_t to_send = 0, read_at = 0, moves = 0, declines = 0;
  bool reader_reads = true;
  // As the transport does it: the reader offers a ring of `grow_to` bytes when the writer has filled
  // all the room it advertised (at a data message's arrival), never at random; and it reads at its
  // own pace (an application that sleeps on a timer between reads: awake, reading nothing).
  bool like_transport = false;
  uint64_t grow_to = 0;

  void read_mailbox(End& me) {
    if (!me.mailbox_pending) return;
    ASSERT_EQ(me.flow.on_peer_mailbox(me.mailbox), FlowError::kNone);
    me.mailbox_pending = false;
  }
  // The RDMA Write lands: in a ring that must still exist, on slots that must hold nothing unread.
  void place(const Message& m) {
    auto it = rings.find(m.gen);
    ASSERT_NE(it, rings.end()) << "data written into ring " << m.gen << ", which is gone";
    Ring& ring = it->second;
    ASSERT_LE(m.offset + m.arg, ring.cursor.size()) << "a write past the ring's end";
    for (uint64_t i = 0; i < m.arg; ++i) {
      ASSERT_FALSE(ring.full[m.offset + i]) << "a write over an unread byte";
      ring.cursor[m.offset + i] = m.cursor + i;
      ring.full[m.offset + i] = 1;
    }
  }
  void deliver(End& to) {
    Message m = to.inbox.front();
    to.inbox.pop_front();
    FlowError e = FlowError::kNone;
    switch (m.kind) {
      case Message::kData:
        place(m);
        if (::testing::Test::HasFatalFailure()) return;
        // RdmaStream reads its mailbox before it counts data while an answer is awaited.
        if (to.flow.ring_answer_awaited()) read_mailbox(to);
        e = to.flow.on_data_arrived(m.arg);
        if (e == FlowError::kNone && like_transport && &to == &r && to.flow.may_offer_ring() &&
            to.flow.window_full() && to.flow.our_ring_size() < grow_to) {
          rings.emplace(to.flow.offer_ring(grow_to), Ring(grow_to));
        }
        break;
      case Message::kWakeup: e = to.flow.on_wakeup_arrived(m.arg); break;
      case Message::kArm: e = to.flow.on_arm_arrived(); break;
      case Message::kMailbox:
        to.mailbox = m.update;
        to.mailbox_pending = true;
        return;
    }
    ASSERT_EQ(e, FlowError::kNone) << "message kind " << m.kind;
    to.sleeping = false;
  }
  void progress(End& me, End& peer) {
    me.flow.on_reposted(me.flow.receives_to_repost());
    read_mailbox(me);
    if (::testing::Test::HasFatalFailure()) return;
    if (&me == &w && me.flow.ring_offer_pending()) {
      if (rng() % 4 == 0) {
        me.flow.decline_ring_offer();
        ++declines;
      } else {
        me.flow.adopt_ring_offer();
        ++moves;
      }
    }
    if (&me == &r) reader_rings();
    if (me.flow.update_due()) peer.inbox.push_back({Message::kMailbox, 0, 0, 0, 0, me.flow.make_update()});
    if (me.flow.may_send_wakeup()) {
      peer.inbox.push_back({Message::kWakeup, me.flow.on_wakeup_sent() & FlowControl::kWakeupCountMask});
    }
  }
  // The reader frees what its flow control says is done and now and then offers a ring of another size.
  void reader_rings() {
    FlowControl& f = r.flow;
    if (f.ring_declined()) {
      rings.erase(f.offered_ring_gen());
      f.on_offer_declined_done();
    }
    if (f.ring_retirable()) {
      for (char c : rings.at(f.our_ring_gen()).full) ASSERT_FALSE(c) << "a retired ring held unread bytes";
      rings.erase(f.our_ring_gen());
      f.on_old_ring_retired();
    }
    if (!like_transport && f.may_offer_ring() && rng() % 8 == 0) {
      uint64_t size = uint64_t{1} << (10 + rng() % 6);
      rings.emplace(f.offer_ring(size), Ring(size));
    }
  }
  void run(End& me, End& peer) {
    progress(me, peer);
    if (::testing::Test::HasFatalFailure()) return;
    bool did = false;
    if (&me == &w && to_send > 0) {
      uint64_t n = me.flow.data_room(1 + rng() % std::min<uint64_t>(to_send, 5000));
      if (n > 0) {
        peer.inbox.push_back({Message::kData, n, me.flow.peer_ring_gen(), me.flow.peer_ring_offset(), me.flow.sent()});
        me.flow.on_data_sent(n);
        to_send -= n;
        did = true;
      } else if (me.flow.may_arm()) {
        me.flow.arm();
        peer.inbox.push_back({Message::kMailbox, 0, 0, 0, 0, me.flow.make_update()});
        me.flow.on_arm_sent();
        peer.inbox.push_back({Message::kArm, me.flow.arm_count()});
      }
    }
    if (&me == &r && like_transport && me.flow.readable() > 0 && rng() % 4 != 0) {
      progress(me, peer);
      return;  // its timer has not run out: awake, reading nothing this turn
    }
    if (&me == &r && reader_reads && me.flow.readable() > 0) {
      uint64_t want = 1 + rng() % me.flow.readable();
      while (want > 0) {
        RingSpan s = me.flow.read_span();
        ASSERT_GT(s.length, 0u);
        uint64_t n = std::min(want, s.length);
        Ring& ring = rings.at(s.gen);
        for (uint64_t i = 0; i < n; ++i) {
          ASSERT_TRUE(ring.full[s.offset + i]) << "read a byte never written";
          ASSERT_EQ(ring.cursor[s.offset + i], read_at + i) << "read another byte than the one sent there";
          ring.full[s.offset + i] = 0;
        }
        me.flow.on_app_consumed(n);
        read_at += n;
        want -= n;
      }
      did = true;
    }
    progress(me, peer);
    if (!did) me.sleeping = true;
  }
};

// Runs the model until the reader has read every byte: no deadlock on the way (both asleep, nothing
// in flight), no byte missing at the end.
void run_to_end(Model& m) {
  m.read_at = m.w.flow.sent();
  uint64_t end = m.read_at + m.to_send;
  for (int i = 0; i < 4000000 && m.read_at != end; ++i) {
    bool quiet = m.w.sleeping && m.r.sleeping && m.w.inbox.empty() && m.r.inbox.empty();
    ASSERT_FALSE(quiet) << "deadlock: both asleep, nothing in flight, " << end - m.read_at << " bytes to go";
    switch (m.rng() % 4) {
      case 0: if (!m.w.sleeping) m.run(m.w, m.r); break;
      case 1: if (!m.r.sleeping) m.run(m.r, m.w); break;
      case 2: if (!m.w.inbox.empty()) m.deliver(m.w); break;
      case 3: if (!m.r.inbox.empty()) m.deliver(m.r); break;
    }
    if (::testing::Test::HasFatalFailure()) return;
  }
  ASSERT_EQ(m.read_at, end) << "not every byte arrived";
}

void simulate(uint64_t seed) {
  std::mt19937_64 setup(seed);
  uint64_t ring = uint64_t{1} << (10 + setup() % 4);
  Model m(seed, ring, 3 + setup() % 8);
  m.to_send = 30000 + setup() % 100000;
  run_to_end(m);
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_GT(m.moves + m.declines, 0u);
}

void simulate_like_transport(uint64_t seed) {
  std::mt19937_64 setup(seed);
  uint64_t ring = uint64_t{1} << (10 + setup() % 3);
  Model m(seed, ring, 3 + setup() % 8);
  m.like_transport = true;
  m.grow_to = ring << (1 + setup() % 4);
  m.to_send = 30000 + setup() % 100000;
  run_to_end(m);
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_GT(m.moves, 0u);
}

TEST(RingMoveSimulation, GrowingWhenFullAsTheTransportDoesUnderAPacedReader) {
  for (uint64_t seed = 1; seed <= 2000; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    simulate_like_transport(seed);
    if (HasFailure()) return;
  }
}

TEST(RingMoveSimulation, EveryByteIsReadWhereItWasWrittenAcrossMoves) {
  for (uint64_t seed = 1; seed <= 2000; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    simulate(seed);
    if (HasFailure()) return;
  }
}

}  // namespace
}  // namespace tcp2rdma::transport
