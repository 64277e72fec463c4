// A ChannelOpen as the server's listener checks it (stream_listener.h, valid_open) before it holds
// it: what an honest client sends passes, and each field a hostile one could stretch is refused,
// among them the first bytes of wire version 5 (no more than the 16 the record has room for).
#include <gtest/gtest.h>
#include <netinet/in.h>

#include "stream_listener.h"
#include "wire.h"

namespace tcp2rdma::transport {
namespace {

ChannelOpen honest_open() {
  ChannelOpen o{};
  o.magic = kSetupMagic;
  o.version = kProtocolVersion;
  o.kind = kOpenKind;
  o.ring_size_log2 = 16;
  o.max_server_ring_log2 = 16;
  o.queue_depth = 4;
  o.client_channel = 2;
  o.tuple.family = AF_INET;
  o.first_length = kOpenFirstBytes;
  return o;
}

TEST(ChannelOpen, IsOneSetupRecordWithItsFirstBytesAfterTheVersion4Fields) {
  EXPECT_EQ(sizeof(ChannelOpen), kSetupRecord);
  EXPECT_EQ(offsetof(ChannelOpen, first_bytes), 64u);
  EXPECT_EQ(sizeof(ChannelAnswer), kSetupRecord);
}

TEST(ChannelOpen, AnHonestOpenPassesWithOrWithoutFirstBytes) {
  ChannelOpen o = honest_open();
  EXPECT_TRUE(valid_open(o));
  o.first_length = 0;
  EXPECT_TRUE(valid_open(o));
}

TEST(ChannelOpen, MoreFirstBytesThanTheRecordHoldsAreRefused) {
  ChannelOpen o = honest_open();
  o.first_length = kOpenFirstBytes + 1;
  EXPECT_FALSE(valid_open(o));
  o.first_length = 255;
  EXPECT_FALSE(valid_open(o));
}

TEST(ChannelOpen, AnOlderVersionOrAnyStretchedFieldIsRefused) {
  ChannelOpen o = honest_open();
  o.version = 4;
  EXPECT_FALSE(valid_open(o));
  o = honest_open();
  o.ring_size_log2 = 30;
  EXPECT_FALSE(valid_open(o));
  o = honest_open();
  o.queue_depth = 3;
  EXPECT_FALSE(valid_open(o));
  o = honest_open();
  o.client_channel = kLinkChannel;
  EXPECT_FALSE(valid_open(o));
  o = honest_open();
  o.client_channel = static_cast<uint16_t>(kMaxChannels);
  EXPECT_FALSE(valid_open(o));
  o = honest_open();
  o.tuple.family = AF_UNIX;
  EXPECT_FALSE(valid_open(o));
}

}  // namespace
}  // namespace tcp2rdma::transport
