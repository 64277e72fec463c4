// The fork channel's messages (preload/process/fork_channel.h) and the parent's record of what it lent
// (preload/registry/lent_streams.h), on the host: a socket pair stands in for the two processes.
#include "process/fork_channel.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <utility>
#include <thread>

#include "registry/fork_share.h"
#include "registry/lent_streams.h"
#include "registry/tracked_socket.h"

namespace tcp2rdma::preload {
namespace {

struct Pair {
  int ends[2] = {-1, -1};
  Pair() { EXPECT_TRUE(open_fork_channel(ends)); }
  ~Pair() {
    for (int e : ends) {
      if (e >= 0) close(e);
    }
  }
};

TEST(ForkChannel, AClaimArrivesWithItsSerial) {
  Pair p;
  ASSERT_TRUE(send_claim(p.ends[1], 0x1122334455667788ULL));
  uint64_t serial = 0;
  HandBack unused;
  EXPECT_EQ(receive_message(p.ends[0], 1000, &serial, &unused), ChannelMessage::kClaim);
  EXPECT_EQ(serial, 0x1122334455667788ULL);
}

TEST(ForkChannel, AnAnswerCarriesTheBytesAndTheFlagsExactly) {
  Pair p;
  HandBack sent;
  sent.outcome = HandBack::Outcome::kMoved;
  sent.then_end = true;
  sent.write_shut = true;
  sent.alone = true;
  for (int i = 0; i < 300000; ++i) sent.bytes.push_back(static_cast<uint8_t>(i * 7));
  ASSERT_TRUE(send_answer(p.ends[0], 42, sent));
  uint64_t serial = 0;
  HandBack got;
  ASSERT_EQ(receive_message(p.ends[1], 1000, &serial, &got), ChannelMessage::kAnswer);
  EXPECT_EQ(serial, 42u);
  EXPECT_EQ(got.outcome, HandBack::Outcome::kMoved);
  EXPECT_TRUE(got.then_end);
  EXPECT_TRUE(got.write_shut);
  EXPECT_TRUE(got.alone);
  EXPECT_EQ(got.bytes, sent.bytes);
}

// "Alone" belongs to a moved connection only: on any other answer the flag is not believed.
TEST(ForkChannel, OnlyAMovedConnectionCanBeTheChildsAlone) {
  Pair p;
  HandBack sent;
  sent.outcome = HandBack::Outcome::kParents;
  sent.alone = true;
  ASSERT_TRUE(send_answer(p.ends[0], 8, sent));
  uint64_t serial = 0;
  HandBack got;
  ASSERT_EQ(receive_message(p.ends[1], 1000, &serial, &got), ChannelMessage::kAnswer);
  EXPECT_EQ(got.outcome, HandBack::Outcome::kParents);
  EXPECT_FALSE(got.alone);
}

TEST(ForkChannel, AnAnswerWithoutBytesNeedsNoMemfd) {
  Pair p;
  HandBack sent;
  sent.outcome = HandBack::Outcome::kParents;
  ASSERT_TRUE(send_answer(p.ends[0], 7, sent));
  uint64_t serial = 0;
  HandBack got;
  got.bytes = {1, 2, 3};
  ASSERT_EQ(receive_message(p.ends[1], 1000, &serial, &got), ChannelMessage::kAnswer);
  EXPECT_EQ(got.outcome, HandBack::Outcome::kParents);
  EXPECT_TRUE(got.bytes.empty());
  EXPECT_FALSE(got.then_end);
}

TEST(ForkChannel, AnAnswerSentBeforeTheParentLeftIsStillRead) {
  Pair p;
  HandBack sent;
  sent.outcome = HandBack::Outcome::kMoved;
  sent.bytes = {9, 8, 7};
  ASSERT_TRUE(send_answer(p.ends[0], 5, sent));
  close(std::exchange(p.ends[0], -1));  // the parent exits after answering unasked
  EXPECT_FALSE(send_claim(p.ends[1], 5));
  uint64_t serial = 0;
  HandBack got;
  ASSERT_EQ(receive_message(p.ends[1], 1000, &serial, &got), ChannelMessage::kAnswer);
  EXPECT_EQ(got.bytes, sent.bytes);
  EXPECT_EQ(receive_message(p.ends[1], 1000, &serial, &got), ChannelMessage::kClosed);
}

TEST(ForkChannel, NothingInTimeAndAClosedEndAreTold) {
  Pair p;
  uint64_t serial = 0;
  HandBack got;
  EXPECT_EQ(receive_message(p.ends[0], 10, &serial, &got), ChannelMessage::kNone);
  close(std::exchange(p.ends[1], -1));
  EXPECT_EQ(receive_message(p.ends[0], 1000, &serial, &got), ChannelMessage::kClosed);
}

TEST(ForkChannel, AMessageThatBreaksTheFormatClosesTheLine) {
  Pair p;
  const char junk[24] = "not a message at all!!";
  ASSERT_EQ(send(p.ends[1], junk, sizeof junk, 0), static_cast<ssize_t>(sizeof junk));
  uint64_t serial = 0;
  HandBack got;
  EXPECT_EQ(receive_message(p.ends[0], 1000, &serial, &got), ChannelMessage::kClosed);
  ASSERT_EQ(send(p.ends[1], junk, 5, 0), 5);  // short
  EXPECT_EQ(receive_message(p.ends[0], 1000, &serial, &got), ChannelMessage::kClosed);
}

TEST(LentStreams, AClaimFindsWhatThisChildWasLentOnly) {
  lend_streams(101, {1, 2});
  lend_streams(102, {2});
  EXPECT_TRUE(is_lent_to(1, 101));
  EXPECT_FALSE(is_lent_to(1, 102));
  EXPECT_TRUE(is_lent_to(2, 102));
  forget_channel(101);
  EXPECT_FALSE(is_lent(1));
  EXPECT_TRUE(is_lent(2));
  forget_channel(102);
  EXPECT_FALSE(is_lent(2));
}

TEST(LentStreams, AClaimDuringTheHandBackWaitsForItsAnswer) {
  lend_streams(201, {10});
  EXPECT_FALSE(handed_back_for(10, 0).has_value());  // still the parent's: it moves it itself
  note_handing_back(10);
  std::thread parent([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    HandBack answer;
    answer.outcome = HandBack::Outcome::kMoved;
    answer.bytes = {4, 5};
    keep_handed_back(10, answer);
  });
  auto got = handed_back_for(10, 5000);
  parent.join();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->outcome, HandBack::Outcome::kMoved);
  EXPECT_EQ(got->bytes, (std::vector<uint8_t>{4, 5}));
  EXPECT_EQ(unclaimed_hand_backs().size(), 1u);  // kept for the exit's unasked answer
  // The peer's bytes went to that answer: a second child that holds the connection gets none of them
  // again (the kernel gives each byte to one reader).
  auto again = handed_back_for(10, 0);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->outcome, HandBack::Outcome::kMoved);
  EXPECT_TRUE(again->bytes.empty());
  note_answered(10, 201);
  EXPECT_TRUE(unclaimed_hand_backs().empty());
  EXPECT_FALSE(is_lent(10));
}

// A child holds a connection its parent let go of alone only while no other child alive holds it.
TEST(LentStreams, OneChildAloneHoldsWhatNoOtherChildHolds) {
  lend_streams(401, {30, 31});
  lend_streams(402, {30});
  EXPECT_FALSE(held_only_by(30, 401));
  EXPECT_FALSE(held_only_by(30, 402));
  EXPECT_TRUE(held_only_by(31, 401));
  EXPECT_FALSE(held_only_by(31, 402));  // not lent to it at all
  forget_channel(402);                  // that child exited
  EXPECT_TRUE(held_only_by(30, 401));
  forget_channel(401);
  EXPECT_FALSE(held_only_by(30, 401));
}

// A child claimed a connection while this process still held it: it holds it alone once this process
// lets go, unless this process forked since or another child holds it too.
TEST(LentStreams, AClaimedConnectionIsTheChildsAloneOnceLetGo) {
  note_claimed(50, 501);
  EXPECT_FALSE(claimed_alone_by(50, 501));  // still held here
  note_let_go(50);
  EXPECT_TRUE(claimed_alone_by(50, 501));
  EXPECT_FALSE(claimed_alone_by(50, 502));  // not that child's claim
  EXPECT_EQ(claims_let_go(), (std::vector<std::pair<int, uint64_t>>{{501, 50}}));
  forget_channel(501);
  EXPECT_FALSE(claimed_alone_by(50, 501));
  EXPECT_TRUE(claims_let_go().empty());
}

// The parent's last close may come while the claim's move is still under way (a slow guest: the
// move's marker exchange outlasted accept_fork_echo handoff-late's 300 ms): the claiming child is
// still listed as a holder until its answer is sent, and it does not count as another holder.
TEST(LentStreams, TheClaimersOwnHoldDuringItsMoveDoesNotKeepItShared) {
  lend_streams(551, {55});
  note_claimed(55, 551);
  note_let_go(55);  // the last hold dropped before note_answered
  note_answered(55, 551);
  EXPECT_TRUE(claimed_alone_by(55, 551));
  forget_channel(551);
}

TEST(LentStreams, AnotherHolderBeforeTheLetGoKeepsItShared) {
  lend_streams(601, {60});  // another child holds it, unclaimed
  note_claimed(60, 602);
  note_let_go(60);
  EXPECT_FALSE(claimed_alone_by(60, 602));
  note_claimed(61, 603);
  note_forking();  // a fork while this process holds no descriptor of it gives it to nobody
  note_let_go(61);
  EXPECT_TRUE(claimed_alone_by(61, 603));
  forget_channel(601);
  forget_channel(602);
  forget_channel(603);
}

// A fork while this process still holds a descriptor of the claimed connection gives it to the new
// process: the claimer never holds it alone.
TEST(LentStreams, AForkWithADescriptorOfItKeepsItShared) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  SocketHold held = SocketHold::of(fd);
  ASSERT_TRUE(held);
  held->defer_upgrade(std::make_unique<TrackedSocket::DeferredUpgrade>());  // names it by a serial
  uint64_t serial = held->serial();
  ASSERT_NE(serial, 0u);
  note_claimed(serial, 701);
  note_forking();  // the fork wrapper's step before the real fork
  close(fd);
  held = SocketHold();  // the last reference: the destructor lets go (note_let_go)
  EXPECT_FALSE(claimed_alone_by(serial, 701));
  forget_channel(701);
}

// The last close of a lent connection whose upgrade a fork deferred: still deferred, the child that
// claims it takes the upgrade up (kResume); taken up here and never on RDMA, the child's copy is the
// connection on TCP (kStaysTcp). Without the second, the claim found nothing kept and the child's
// working TCP socket was replaced with an unconnected one (a ForkingTCPServer parent slow to close
// its copy, integration.fork_burst.pair).
TEST(LentStreams, TheLastCloseOfADeferredConnectionLeavesItToTheChild) {
  for (bool taken_up : {false, true}) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    SocketHold held = SocketHold::of(fd);
    ASSERT_TRUE(held);
    auto record = std::make_unique<TrackedSocket::DeferredUpgrade>();
    record->generation = fork_generation();
    held->defer_upgrade(std::move(record));
    uint64_t serial = held->serial();
    lend_streams(702, {serial});
    if (taken_up) (void)held->take_deferred_upgrade();  // this process took it up, and it stayed tcp
    close(fd);
    held = SocketHold();  // the last reference
    auto answer = handed_back_for(serial, 100);
    ASSERT_TRUE(answer.has_value()) << "taken up: " << taken_up;
    EXPECT_EQ(answer->outcome, taken_up ? HandBack::Outcome::kStaysTcp : HandBack::Outcome::kResume);
    forget_channel(702);
  }
}

TEST(ForkChannel, AQuestionArrivesWithItsSerial) {
  Pair p;
  ASSERT_TRUE(send_ask(p.ends[1], 99));
  uint64_t serial = 0;
  HandBack ignored;
  EXPECT_EQ(receive_message(p.ends[0], 1000, &serial, &ignored), ChannelMessage::kAsk);
  EXPECT_EQ(serial, 99u);
}

TEST(LentStreams, AHandBackThatNeverEndsAnswersFailed) {
  lend_streams(301, {20});
  note_handing_back(20);
  auto got = handed_back_for(20, 20);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->outcome, HandBack::Outcome::kFailed);
  forget_channel(301);
}

}  // namespace
}  // namespace tcp2rdma::preload
