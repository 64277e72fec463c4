// Flow control as pure logic: edge cases one by one, then two ends driven against each other through
// a simulated queue pair for many random schedules, cursors starting just below 2^64 so that they wrap.
#include "flow_control.h"

#include <gtest/gtest.h>

#include <deque>
#include <random>
#include <string>

namespace tcp2rdma::transport {
namespace {

constexpr uint64_t kNearWrap = ~uint64_t{0} - 1000;

FlowConfig config(uint64_t ring = 4096, uint64_t depth = 8, uint64_t a_first = kNearWrap,
                  uint64_t b_first = 12345) {
  return FlowConfig{ring, a_first, depth, depth, ring, b_first, depth, depth};
}

TEST(FlowControl, DataRoomKeepsTwoCreditsBackAndStopsAtTheRingEnd) {
  FlowControl f(config(4096, 4));
  EXPECT_EQ(f.credits(), 4u);
  EXPECT_EQ(f.data_room(10000), 4096u - (kNearWrap & 4095));  // up to the ring's end
  f.on_data_sent(f.data_room(10000));
  EXPECT_EQ(f.peer_ring_offset(), 0u);
  EXPECT_GT(f.data_room(10000), 0u);
  f.on_data_sent(1);
  EXPECT_EQ(f.credits(), 2u);
  EXPECT_EQ(f.data_room(1), 0u);  // the last two credits are not for data
  EXPECT_TRUE(f.may_arm());
  f.arm();
  f.on_arm_sent();
  EXPECT_TRUE(f.may_send_close());
  f.on_close_sent();
  EXPECT_FALSE(f.may_send_close());
}

TEST(FlowControl, AHeldMessageGrowsWithoutCreditsWithinTheRingAndArrivesWhole) {
  // The writer's held message (MSG_MORE, TCP_CORK) takes one credit when it starts and grows by the
  // bytes that follow it; the reader takes it as one message of its whole length.
  FlowControl writer(config(4096, 3, 0, 0));
  FlowControl reader(config(4096, 3, 0, 0));
  ASSERT_EQ(writer.data_room(100), 100u);
  writer.on_data_sent(100);
  EXPECT_EQ(writer.credits(), 2u);
  EXPECT_EQ(writer.data_room(1), 0u);         // a new message needs three credits left
  EXPECT_EQ(writer.append_room(500), 500u);   // the held one grows without any
  writer.on_data_appended(500);
  EXPECT_EQ(writer.append_room(10000), 4096u - 600u);  // the ring's free space, to its end
  writer.on_data_appended(writer.append_room(10000));
  EXPECT_EQ(writer.append_room(1), 0u);  // the ring is full
  EXPECT_EQ(writer.peer_ring_offset(), 0u);
  EXPECT_EQ(reader.on_data_arrived(4096), FlowError::kNone);  // one message, one receive
  EXPECT_EQ(reader.readable(), 4096u);
  // One byte more than the reader advertised is an overrun, held or not.
  FlowControl reader2(config(4096, 3, 0, 0));
  EXPECT_EQ(reader2.on_data_arrived(4097), FlowError::kRingOverrun);
}

TEST(FlowControl, AReleaseComesLastAndOnlyAfterAnEnd) {
  // Receiving: a release before any end would let a peer stop without a word and be taken for a clean
  // end; one after an abort is fine (the abort is the end); nothing may follow it.
  FlowControl f(config(4096, 4));
  EXPECT_EQ(f.on_release_arrived(false), FlowError::kReleaseWithoutEnd);
  EXPECT_FALSE(f.peer_released());
  EXPECT_EQ(f.on_data_arrived(10), FlowError::kNone);
  EXPECT_EQ(f.on_close_arrived(), FlowError::kNone);
  EXPECT_EQ(f.on_release_arrived(false), FlowError::kNone);
  EXPECT_TRUE(f.peer_released());
  EXPECT_EQ(f.on_release_arrived(false), FlowError::kDuplicateRelease);
  EXPECT_EQ(f.on_data_arrived(1), FlowError::kAfterRelease);
  EXPECT_EQ(f.on_wakeup_arrived(0), FlowError::kAfterRelease);
  EXPECT_EQ(f.on_arm_arrived(), FlowError::kAfterRelease);
  FlowControl g(config(4096, 4));
  EXPECT_EQ(g.on_release_arrived(true), FlowError::kNone);  // after the peer's abort
  // The release uses the receive kept for it, not an advertised one: it arrives with none left.
  FlowControl h(config(4096, 1));
  EXPECT_EQ(h.on_close_arrived(), FlowError::kNone);
  EXPECT_EQ(h.on_release_arrived(false), FlowError::kNone);
}

TEST(FlowControl, AfterOurReleaseThePeersAloneEndsTheChannel) {
  // Our release went first (our application closed): nothing of ours reads the channel any more, so
  // the peer's release needs no end of its own before it. It answers ours when the peer's own end
  // was still owed for want of a credit (a "to TCP" marker, or a close behind a held message).
  FlowControl f(config(4096, 4));
  EXPECT_EQ(f.on_data_arrived(10), FlowError::kNone);
  f.on_release_sent();
  EXPECT_EQ(f.on_release_arrived(false), FlowError::kNone);
  EXPECT_TRUE(f.peer_released());
  EXPECT_EQ(f.on_release_arrived(false), FlowError::kDuplicateRelease);
  EXPECT_EQ(f.on_data_arrived(1), FlowError::kAfterRelease);
  // The same after our close went with our release.
  FlowControl g(config(4096, 4));
  g.on_close_release_sent();
  EXPECT_EQ(g.on_release_arrived(false), FlowError::kNone);
}

TEST(FlowControl, ACloseWithItsReleaseNeedsNoCreditAndEndsTheStreamOnce) {
  // Sending: a close owed for want of a receive may go with the release, on the receive kept for it.
  FlowControl w(config(4096, 0));
  EXPECT_EQ(w.credits(), 0u);
  EXPECT_FALSE(w.may_send_close());
  EXPECT_TRUE(w.may_send_close_release());
  w.on_close_release_sent();
  EXPECT_TRUE(w.release_sent());
  EXPECT_FALSE(w.may_send_close_release());
  EXPECT_FALSE(w.may_send_release());
  // Receiving: the end, then the release, with no advertised receive left; once only, and never
  // after another end.
  FlowControl f(config(4096, 1));
  EXPECT_EQ(f.on_data_arrived(10), FlowError::kNone);
  EXPECT_EQ(f.on_close_release_arrived(), FlowError::kNone);
  EXPECT_TRUE(f.peer_closed());
  EXPECT_TRUE(f.peer_released());
  EXPECT_EQ(f.readable(), 10u);
  EXPECT_EQ(f.on_close_release_arrived(), FlowError::kDuplicateRelease);
  EXPECT_EQ(f.on_data_arrived(1), FlowError::kAfterRelease);
  FlowControl g(config(4096, 4));
  EXPECT_EQ(g.on_close_arrived(), FlowError::kNone);
  EXPECT_EQ(g.on_close_release_arrived(), FlowError::kDuplicateClose);
  FlowControl h(config(4096, 4));
  EXPECT_EQ(h.on_move_arrived(), FlowError::kNone);
  EXPECT_EQ(h.on_close_release_arrived(), FlowError::kDataAfterClose);
}

TEST(FlowControl, AfterItsReleaseASideSendsNothing) {
  FlowControl f(config(4096, 8));
  f.on_data_sent(100);
  EXPECT_TRUE(f.may_send_close());
  f.on_close_sent();
  EXPECT_TRUE(f.may_send_release());
  f.on_release_sent();
  EXPECT_FALSE(f.may_send_release());
  EXPECT_EQ(f.data_room(10), 0u);
  EXPECT_FALSE(f.may_arm());
  EXPECT_FALSE(f.may_send_move());
  EXPECT_FALSE(f.may_send_close());
  // Not even a credit update or a wakeup for the peer: its memory may be gone.
  EXPECT_EQ(f.on_data_arrived(10), FlowError::kNone);
  f.on_reposted(1);
  f.on_app_consumed(10);
  EXPECT_FALSE(f.update_due());
  EXPECT_FALSE(f.may_send_wakeup());
}

TEST(FlowControl, RingSpaceComesBackOnlyThroughTheMailbox) {
  FlowControl f(config(4096, 100, 0));
  f.on_data_sent(4096);
  EXPECT_EQ(f.data_room(1), 0u);
  EXPECT_EQ(f.on_peer_mailbox({1000, 100, 0, 0, 0}), FlowError::kNone);
  EXPECT_EQ(f.data_room(5000), 1000u);
}

TEST(FlowControl, HostileMailboxUpdatesAreRefused) {
  FlowControl f(config(4096, 8, 100));
  f.on_data_sent(50);
  EXPECT_EQ(f.on_peer_mailbox({99, 8, 0, 0, 0}), FlowError::kConsumedBackwards);
  EXPECT_EQ(f.on_peer_mailbox({151, 8, 0, 0, 0}), FlowError::kConsumedUnsent);
  EXPECT_EQ(f.on_peer_mailbox({150, 7, 0, 0, 0}), FlowError::kPostedBackwards);
  EXPECT_EQ(f.on_peer_mailbox({150, 10, 0, 0, 0}), FlowError::kPostedBeyondQueue);  // 10 - 1 used > 8
  EXPECT_EQ(f.on_peer_mailbox({150, 9, 0, 0, 0}), FlowError::kNone);
  EXPECT_EQ(f.on_peer_mailbox({150, 9, 5, 0, 0}), FlowError::kNone);
  EXPECT_EQ(f.on_peer_mailbox({150, 9, 4, 0, 0}), FlowError::kArmedBackwards);
}

TEST(FlowControl, OnlyAdvertisedReceivesMayBeUsed) {
  // Receives are reposted at once, but the peer may use one only after our update told it so.
  FlowControl f(config(4096, 2));
  EXPECT_EQ(f.on_data_arrived(10), FlowError::kNone);
  f.on_reposted(1);
  EXPECT_EQ(f.on_data_arrived(10), FlowError::kNone);
  f.on_reposted(1);
  EXPECT_EQ(f.on_data_arrived(10), FlowError::kNoReceive);  // reposted, not yet advertised
  FlowControl g(config(4096, 2));
  EXPECT_EQ(g.on_data_arrived(10), FlowError::kNone);
  g.on_reposted(1);
  g.on_app_consumed(10);
  g.make_update();  // advertises the repost
  EXPECT_EQ(g.on_data_arrived(10), FlowError::kNone);
  EXPECT_EQ(g.on_data_arrived(10), FlowError::kNone);
  EXPECT_EQ(g.on_data_arrived(10), FlowError::kNoReceive);
}

TEST(FlowControl, HostileMessagesAreRefused) {
  FlowControl f(config(4096, 2));
  EXPECT_EQ(f.on_data_arrived(0), FlowError::kEmptyData);
  EXPECT_EQ(f.on_data_arrived(10), FlowError::kNone);
  EXPECT_EQ(f.on_data_arrived(10), FlowError::kNoReceive);  // both receives are gone now
  FlowControl g(config(4096, 4));
  EXPECT_EQ(g.on_data_arrived(4097), FlowError::kRingOverrun);
  EXPECT_EQ(g.on_wakeup_arrived(0), FlowError::kUnexpectedWakeup);  // we never armed
  EXPECT_EQ(g.on_close_arrived(), FlowError::kNone);
  EXPECT_EQ(g.on_close_arrived(), FlowError::kDuplicateClose);
  FlowControl h(config(4096, 4));
  EXPECT_EQ(h.on_close_arrived(), FlowError::kNone);
  EXPECT_EQ(h.on_data_arrived(1), FlowError::kDataAfterClose);
  // "To TCP" ends the peer's traffic on the stream: nothing may follow it, but it may follow a close.
  FlowControl m(config(4096, 8));
  EXPECT_EQ(m.on_move_arrived(), FlowError::kNone);
  EXPECT_TRUE(m.peer_moved());
  EXPECT_EQ(m.on_data_arrived(1), FlowError::kDataAfterClose);
  EXPECT_EQ(m.on_close_arrived(), FlowError::kDataAfterClose);
  EXPECT_EQ(m.on_move_arrived(), FlowError::kDuplicateMove);
  EXPECT_EQ(h.on_move_arrived(), FlowError::kNone);
}

TEST(FlowControl, TheRingOnlyHoldsWhatWasAdvertised) {
  FlowControl f(config(4096, 8));
  ASSERT_EQ(f.on_data_arrived(4096), FlowError::kNone);
  f.on_app_consumed(4096);  // freed, but the peer has not been told yet
  EXPECT_EQ(f.on_data_arrived(1), FlowError::kRingOverrun);
}

TEST(FlowControl, UpdatesAreBatched) {
  FlowControl f(config(4096, 16));
  ASSERT_EQ(f.on_data_arrived(100), FlowError::kNone);
  f.on_app_consumed(100);
  f.on_reposted(f.receives_to_repost());
  EXPECT_FALSE(f.update_due());  // 100 bytes and one receive: not yet a quarter
  ASSERT_EQ(f.on_data_arrived(1000), FlowError::kNone);
  f.on_app_consumed(1000);
  EXPECT_TRUE(f.update_due());  // 1100 >= 4096 / 4
  MailboxUpdate u = f.make_update();
  EXPECT_EQ(u.consumed, 12345u + 1100);
  EXPECT_EQ(u.posted, 17u);
  EXPECT_FALSE(f.update_due());
}

TEST(FlowControl, AReceiveBatchIsAQuarterAtLeastTwoAndNeverMoreThanThePeerCanSend) {
  EXPECT_EQ(FlowControl::receive_batch(3), 1u);  // the peer has one data message in flight at most
  EXPECT_EQ(FlowControl::receive_batch(4), 2u);
  EXPECT_EQ(FlowControl::receive_batch(8), 2u);
  EXPECT_EQ(FlowControl::receive_batch(16), 4u);
  EXPECT_EQ(FlowControl::receive_batch(128), 32u);
}

// Request and response at depth 4 (a link's shallow channels): each side's updates come one for two
// messages, where a quarter of the queue (one receive) made one for every message; and neither side
// ever finds itself without credit for its next message.
TEST(FlowControl, PingPongAtDepthFourUpdatesEveryOtherMessage) {
  FlowControl a(config(4096, 4, kNearWrap, 12345)), b(config(4096, 4, 12345, kNearWrap));
  int updates_a = 0, updates_b = 0;
  // One side's message to the other: sent, arrived, read, its receive reposted, and the update the
  // receiver's progress then owes (delivered at once, as RC puts it before the reply).
  auto message = [](FlowControl& from, FlowControl& to, int* updates) {
    uint64_t n = from.data_room(64);  // less at the ring's end
    ASSERT_GT(n, 0u) << "no credit for the next message";
    from.on_data_sent(n);
    ASSERT_EQ(to.on_data_arrived(n), FlowError::kNone);
    to.on_app_consumed(n);
    to.on_reposted(to.receives_to_repost());
    if (to.update_due()) {
      ASSERT_EQ(from.on_peer_mailbox(to.make_update()), FlowError::kNone);
      ++*updates;
    }
  };
  for (int i = 0; i < 100; ++i) {
    message(a, b, &updates_b);
    if (HasFatalFailure()) return;
    message(b, a, &updates_a);
    if (HasFatalFailure()) return;
  }
  EXPECT_EQ(updates_a, 50);
  EXPECT_EQ(updates_b, 50);
}

TEST(FlowControl, ArmingNeedsEveryReceiveRepostedAndOneArmAtATime) {
  FlowControl f(config(4096, 4));
  ASSERT_EQ(f.on_data_arrived(10), FlowError::kNone);
  EXPECT_FALSE(f.may_arm());
  f.on_reposted(1);
  ASSERT_TRUE(f.may_arm());
  f.arm();
  EXPECT_TRUE(f.update_due());
  EXPECT_EQ(f.make_update().armed, 1u);
  EXPECT_FALSE(f.may_arm());
  EXPECT_EQ(f.on_wakeup_arrived(2), FlowError::kUnexpectedWakeup);
  FlowControl g(config(4096, 4));
  g.arm();
  EXPECT_EQ(g.on_wakeup_arrived(1), FlowError::kNone);
  EXPECT_FALSE(g.armed());
}

// ---- Two ends against each other -------------------------------------------------------------------
// Each side runs only inside its application's calls, as RdmaStream does: it writes until blocked,
// reads until nothing is there, and otherwise sleeps until a completion (data, arm, wakeup, close)
// wakes it. A mailbox write wakes no one and is read only by a running side. Messages travel in
// order per direction and are delivered at random moments.
struct Message {
  enum Kind { kData, kWakeup, kArm, kClose, kMailbox } kind;
  uint64_t arg = 0;
  MailboxUpdate update{};
};

struct Side {
  explicit Side(const FlowConfig& c) : flow(c) {}
  FlowControl flow;
  uint64_t to_send = 0;         // bytes the application still wants to write
  uint64_t to_receive = 0;      // bytes the application still expects
  bool sleeping = false;
  bool reads = true;            // the application reads what arrives
  bool mailbox_pending = false;
  MailboxUpdate mailbox{};      // our mailbox as the peer last wrote it
  int wakeups = 0;
  std::deque<Message> inbox;    // posted by the peer, not yet delivered
};

// The network delivers one message to `to`.
void deliver(Side& to) {
  Message m = to.inbox.front();
  to.inbox.pop_front();
  FlowError e = FlowError::kNone;
  switch (m.kind) {
    case Message::kData: e = to.flow.on_data_arrived(m.arg); break;
    case Message::kWakeup: e = to.flow.on_wakeup_arrived(m.arg); ++to.wakeups; break;
    case Message::kArm: e = to.flow.on_arm_arrived(); break;
    case Message::kClose: e = to.flow.on_close_arrived(); break;
    case Message::kMailbox:
      to.mailbox = m.update;
      to.mailbox_pending = true;
      return;  // no completion: nobody wakes
  }
  ASSERT_EQ(e, FlowError::kNone) << "message kind " << m.kind;
  to.sleeping = false;
}

// What RdmaStream::progress does whenever the side runs.
void progress(Side& me, Side& peer) {
  me.flow.on_reposted(me.flow.receives_to_repost());
  if (me.mailbox_pending) {
    ASSERT_EQ(me.flow.on_peer_mailbox(me.mailbox), FlowError::kNone);
    me.mailbox_pending = false;
  }
  if (me.flow.update_due()) peer.inbox.push_back({Message::kMailbox, 0, me.flow.make_update()});
  if (me.flow.may_send_wakeup()) peer.inbox.push_back({Message::kWakeup, me.flow.on_wakeup_sent() & FlowControl::kWakeupCountMask, {}});
}

// One turn of a running side: its application's next call, then sleep if it could do nothing.
void run(Side& me, Side& peer, std::mt19937_64& rng) {
  progress(me, peer);
  if (::testing::Test::HasFatalFailure()) return;
  bool did_something = false;
  bool blocked = false;  // it wants to write and cannot
  if (me.to_send > 0) {
    uint64_t n = me.flow.data_room(1 + rng() % std::min<uint64_t>(me.to_send, 3000));
    if (n > 0) {
      me.flow.on_data_sent(n);
      me.to_send -= n;
      peer.inbox.push_back({Message::kData, n, {}});
      did_something = true;
    } else {
      blocked = true;
      if (me.flow.may_arm()) {  // RdmaStream::request_wakeup
        me.flow.arm();
        peer.inbox.push_back({Message::kMailbox, 0, me.flow.make_update()});
        me.flow.on_arm_sent();
        peer.inbox.push_back({Message::kArm, me.flow.arm_count(), {}});
      }
    }
  }
  // It reads when it has nothing to write, cannot write, or by chance: an application that sleeps
  // only when it can neither read nor write (a writer that never reads while it is blocked is
  // blocked on TCP too).
  if (me.reads && me.flow.readable() > 0 && (me.to_send == 0 || blocked || rng() % 2)) {
    uint64_t n = 1 + rng() % me.flow.readable();
    me.flow.on_app_consumed(n);
    me.to_receive -= n;
    did_something = true;
  }
  progress(me, peer);
  if (!did_something) me.sleeping = true;  // wait_for_event
}

// One random event: a side runs, or the network delivers a message to one.
void step(Side& a, Side& b, std::mt19937_64& rng) {
  switch (rng() % 4) {
    case 0: if (!a.sleeping) run(a, b, rng); break;
    case 1: if (!b.sleeping) run(b, a, rng); break;
    case 2: if (!a.inbox.empty()) deliver(a); break;
    case 3: if (!b.inbox.empty()) deliver(b); break;
  }
}

// One random schedule; failures are recorded by gtest.
void simulate(uint64_t seed) {
  std::mt19937_64 rng(seed);
  uint64_t ring = uint64_t{1} << (10 + rng() % 4);
  uint64_t depth = 3 + rng() % 8;
  // Each side's stream starts where the other expects it; both just below 2^64, so both wrap.
  uint64_t a_first = kNearWrap - rng() % 5000, b_first = ~uint64_t{0} - rng() % 5000;
  Side a(FlowConfig{ring, a_first, depth, depth, ring, b_first, depth, depth});
  Side b(FlowConfig{ring, b_first, depth, depth, ring, a_first, depth, depth});
  a.to_send = b.to_receive = 20000 + rng() % 50000;
  b.to_send = a.to_receive = rng() % 30000;
  for (int i = 0; i < 2000000; ++i) {
    bool done = a.to_send == 0 && b.to_send == 0 && a.to_receive == 0 && b.to_receive == 0;
    if (done) break;
    bool quiet = a.sleeping && b.sleeping && a.inbox.empty() && b.inbox.empty();
    ASSERT_FALSE(quiet) << "deadlock: both sides asleep, nothing in flight; a owes " << a.to_send << ", b owes "
                        << b.to_send << "; credits a " << a.flow.credits() << " b " << b.flow.credits();
    step(a, b, rng);
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_EQ(b.to_receive, 0u);
  EXPECT_EQ(a.to_receive, 0u);
  // With few receives a writer blocks often: the arm and wakeup path must have run.
  if (depth <= 4) {
    EXPECT_GT(a.wakeups, 0);
  }
}

// Two writers, neither reading, each blocked on the other's full ring: once the messages in flight
// are delivered both sleep, armed, and nothing moves (an arm's own receive, reposted, is no news that
// deserves a wakeup; answering it made the two wake each other for ever). When they read again,
// every byte arrives.
TEST(FlowSimulation, TwoWritersBlockedOnEachOthersRingFallQuiet) {
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    uint64_t ring = uint64_t{1} << (10 + rng() % 3);
    uint64_t depth = 4 + rng() % 6;
    uint64_t a_first = kNearWrap - rng() % 5000, b_first = ~uint64_t{0} - rng() % 5000;
    Side a(FlowConfig{ring, a_first, depth, depth, ring, b_first, depth, depth});
    Side b(FlowConfig{ring, b_first, depth, depth, ring, a_first, depth, depth});
    a.to_send = b.to_receive = 8 * ring;
    b.to_send = a.to_receive = 8 * ring;
    a.reads = b.reads = false;
    bool quiet = false;
    int steps = 0;
    for (; steps < 200000 && !quiet; ++steps) {
      step(a, b, rng);
      if (HasFatalFailure()) return;
      quiet = a.sleeping && b.sleeping && a.inbox.empty() && b.inbox.empty();
    }
    ASSERT_TRUE(quiet) << "still busy after " << steps << " steps: " << a.wakeups << " and " << b.wakeups
                       << " wakeups delivered";
    EXPECT_EQ(a.flow.readable(), ring);  // each ring is full: that is what blocked the other
    EXPECT_EQ(b.flow.readable(), ring);
    // The applications read again (their reader threads call in): every byte arrives.
    a.reads = b.reads = true;
    a.sleeping = b.sleeping = false;
    for (int i = 0; i < 2000000; ++i) {
      if (a.to_send == 0 && b.to_send == 0 && a.to_receive == 0 && b.to_receive == 0) break;
      bool stuck = a.sleeping && b.sleeping && a.inbox.empty() && b.inbox.empty();
      ASSERT_FALSE(stuck) << "deadlock after reading resumed";
      step(a, b, rng);
      if (HasFatalFailure()) return;
    }
    EXPECT_EQ(a.to_receive, 0u);
    EXPECT_EQ(b.to_receive, 0u);
  }
}

TEST(FlowSimulation, EveryByteArrivesWithoutOverrunOrDeadlock) {
  // Many schedules: breaking the reserve or the arm rule shows up in only some of them.
  for (uint64_t seed = 1; seed <= 3000; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    simulate(seed);
    if (HasFailure()) return;
  }
}

}  // namespace
}  // namespace tcp2rdma::transport
