// LinkSetup (transport/link_setup.h): a link's setup slots, the client's opens waiting for their
// answers and the server's opens waiting for its listener. A peer's lie about them must be told apart.
#include "link_setup.h"

#include <gtest/gtest.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <atomic>
#include <cstring>

namespace tcp2rdma::transport {
namespace {

TEST(LinkSetup, SlotsAreTakenLowestFirstAndFreedOnlyWhenGivenBack) {
  LinkSetup setup;
  for (uint32_t s = 0; s < kSetupSlots; ++s) EXPECT_EQ(setup.take_free_slot(), static_cast<int>(s));
  EXPECT_EQ(setup.take_free_slot(), -1);  // every slot's open is under way
  setup.give_back(17);
  EXPECT_EQ(setup.take_free_slot(), 17);
  EXPECT_EQ(setup.take_free_slot(), -1);
}

TEST(LinkSetup, AnAnswerFindsOnlyAnOpenThatWaitsInItsSlot) {
  LinkSetup setup;
  int slot = setup.take_free_slot();
  ASSERT_EQ(slot, 0);
  // Taken for an open not sent yet: an answer there is one nobody asked for.
  EXPECT_FALSE(setup.waiting_in(0));
  auto* stream = reinterpret_cast<RdmaStream*>(0x1000);
  setup.await(0, {stream, 5, 0xabcdef});
  std::optional<LinkSetup::Awaiting> open = setup.waiting_in(0);
  ASSERT_TRUE(open);
  EXPECT_EQ(open->stream, stream);
  EXPECT_EQ(open->index, 5u);
  EXPECT_EQ(open->client_nonce, 0xabcdefu);
  EXPECT_FALSE(setup.waiting_in(1));
  EXPECT_FALSE(setup.waiting_in(kSetupSlots));  // beyond the slots: the peer lies
  setup.give_back(0);                           // answered
  EXPECT_FALSE(setup.waiting_in(0));
  EXPECT_EQ(setup.take_free_slot(), 0);
}

TEST(LinkSetup, AStreamThatGoesLeavesItsOpenWaitingWithoutIt) {
  LinkSetup setup;
  auto* mine = reinterpret_cast<RdmaStream*>(0x1000);
  auto* other = reinterpret_cast<RdmaStream*>(0x2000);
  ASSERT_EQ(setup.take_free_slot(), 0);
  setup.await(0, {mine, 2, 7});
  setup.forget_stream(0, other);  // not the slot's stream: nothing changes
  EXPECT_EQ(setup.waiting_in(0)->stream, mine);
  setup.forget_stream(0, mine);
  // The slot still waits (the server may write into it); its answer finds no stream to tell.
  ASSERT_TRUE(setup.waiting_in(0));
  EXPECT_EQ(setup.waiting_in(0)->stream, nullptr);
  EXPECT_EQ(setup.waiting_in(0)->index, 2u);
  EXPECT_EQ(setup.take_free_slot(), 1);
}

TEST(LinkSetup, OpensAreKeptOnlyWhereServedAndNoMoreThanTheSlots) {
  std::array<uint8_t, kSetupArea> area{};
  LinkSetup setup;
  setup.set_areas(area.data(), 0x55, 4096);
  EXPECT_EQ(setup.peer_slot_offset(3), 4096u + 3 * kSetupRecord);
  EXPECT_EQ(setup.keep_open(0), Status::kProtocolError);  // a client's link takes no opens
  setup.serve_opens();
  int bell = eventfd(0, EFD_NONBLOCK);
  ASSERT_GE(bell, 0);
  std::atomic<bool> rang{false};
  setup.set_bell(bell, &rang, -1, -1, nullptr);
  ChannelOpen written{};
  written.client_nonce = 42;
  std::memcpy(area.data() + 9 * kSetupRecord, &written, sizeof written);
  EXPECT_EQ(setup.keep_open(9), Status::kOk);
  EXPECT_TRUE(rang.load());  // the listener reads its bell only once this is set
  eventfd_t rung = 0;
  EXPECT_EQ(eventfd_read(bell, &rung), 0);
  EXPECT_EQ(rung, 1u);
  std::vector<LinkSetup::Open> opens = setup.take_opens();
  ASSERT_EQ(opens.size(), 1u);
  EXPECT_EQ(opens[0].slot, 9u);
  EXPECT_EQ(opens[0].request.client_nonce, 42u);
  EXPECT_TRUE(setup.take_opens().empty());
  // A client has at most a slot's worth outstanding: one more is a lie.
  for (uint32_t s = 0; s < kSetupSlots; ++s) EXPECT_EQ(setup.keep_open(s), Status::kOk);
  EXPECT_EQ(setup.keep_open(0), Status::kProtocolError);
  EXPECT_EQ(setup.keep_open(kSetupSlots), Status::kProtocolError);
  // Forgotten by its listener, the link rings no bell.
  EXPECT_EQ(eventfd_read(bell, &rung), 0);  // the rings above
  setup.forget_listener();
  rang = false;
  (void)setup.take_opens();
  EXPECT_EQ(setup.keep_open(3), Status::kOk);
  EXPECT_FALSE(rang.load());
  EXPECT_NE(eventfd_read(bell, &rung), 0);  // nothing written
  close(bell);
}

// Whether the listener's set holds `fd` (an EPOLL_CTL_MOD of an fd it lacks fails with ENOENT).
bool in_set(int set, int fd) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  return epoll_ctl(set, EPOLL_CTL_MOD, fd, &ev) == 0;
}

// The listener's set watches a link's completion channel only while no event loop does: the loop's
// takes find the opens and ring the bell, and a completion would wake both threads.
TEST(LinkSetup, TheListenersSetLeavesTheCompletionsToTheEventLoopsThatWatchTheLink) {
  LinkSetup setup;
  setup.serve_opens();
  int set = epoll_create1(0);
  int bell = eventfd(0, EFD_NONBLOCK);
  int completions[2];
  ASSERT_TRUE(set >= 0 && bell >= 0 && pipe(completions) == 0);
  std::atomic<bool> rang{false};
  LinkSetup::SetCounts counts;  // the listener's tally of links out of its set
  std::atomic<int>& left = counts.left_to_loops;
  setup.set_bell(bell, &rang, set, completions[0], &counts);
  EXPECT_TRUE(in_set(set, completions[0]));
  EXPECT_FALSE(setup.watched_by_pollers());
  setup.pollers_join(+1);
  EXPECT_TRUE(setup.watched_by_pollers());
  EXPECT_FALSE(in_set(set, completions[0]));
  EXPECT_EQ(left.load(), 1);
  setup.pollers_join(+1);  // a second loop's watch
  setup.pollers_join(-1);
  EXPECT_FALSE(in_set(set, completions[0])) << "one loop still watches the link";
  setup.pollers_join(-1);
  EXPECT_FALSE(setup.watched_by_pollers());
  EXPECT_TRUE(in_set(set, completions[0]));
  EXPECT_EQ(left.load(), 0);
  // Forgotten while a loop watches: the set is not touched again, by the forgetting or the loop.
  setup.pollers_join(+1);
  EXPECT_EQ(left.load(), 1);
  setup.forget_listener();
  EXPECT_EQ(left.load(), 0);
  setup.pollers_join(-1);
  EXPECT_FALSE(in_set(set, completions[0]));
  EXPECT_EQ(left.load(), 0);
  EXPECT_EQ(counts.unseen.load(), 0);
  close(completions[0]);
  close(completions[1]);
  close(bell);
  close(set);
}

// A completion channel the set cannot take (epoll_ctl's ADD failing, as it does without memory for
// the entry; here a regular file, which epoll refuses) is counted unseen while no event loop watches
// the link, so that the listener says its descriptor does not wake for every open
// (StreamListener::wakes_for_opens) and its waits look at their times instead.
TEST(LinkSetup, ALinkTheSetCannotTakeIsCountedUnseenWhileNoLoopWatchesIt) {
  LinkSetup setup;
  setup.serve_opens();
  int set = epoll_create1(0);
  int bell = eventfd(0, EFD_NONBLOCK);
  FILE* file = tmpfile();
  ASSERT_TRUE(set >= 0 && bell >= 0 && file != nullptr);
  int unwatchable = fileno(file);
  std::atomic<bool> rang{false};
  LinkSetup::SetCounts counts;
  setup.set_bell(bell, &rang, set, unwatchable, &counts);
  EXPECT_EQ(counts.unseen.load(), 1);
  setup.pollers_join(+1);  // a loop's takes find its opens now
  EXPECT_EQ(counts.unseen.load(), 0);
  EXPECT_EQ(counts.left_to_loops.load(), 1);
  setup.pollers_join(-1);  // and the set still cannot take it
  EXPECT_EQ(counts.unseen.load(), 1);
  EXPECT_EQ(counts.left_to_loops.load(), 0);
  setup.forget_listener();
  EXPECT_EQ(counts.unseen.load(), 0);
  fclose(file);
  close(bell);
  close(set);
}

}  // namespace
}  // namespace tcp2rdma::transport
