// LinkSetup (transport/link_setup.h): a link's setup slots, the client's opens waiting for their
// answers and the server's opens waiting for its listener. A peer's lie about them must be told apart.
#include "link_setup.h"

#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <array>
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
  setup.set_bell(bell, &rang);
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
  EXPECT_EQ(setup.take_bell(), bell);
  EXPECT_EQ(setup.take_bell(), -1);
  close(bell);
}

}  // namespace
}  // namespace tcp2rdma::transport
