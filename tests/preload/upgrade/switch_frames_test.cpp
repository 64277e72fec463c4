#include "upgrade/switch_frames.h"

#include <gtest/gtest.h>

#include <limits>

namespace tcp2rdma::preload {
namespace {

NoncePair make_nonces(uint8_t seed) {
  NoncePair n;
  for (size_t i = 0; i < n.client.size(); ++i) {
    n.client[i] = static_cast<uint8_t>(seed + i);
    n.server[i] = static_cast<uint8_t>(seed * 3 + i);
  }
  return n;
}

constexpr uint64_t kUnbounded = std::numeric_limits<uint64_t>::max();

TEST(SwitchFrames, RoundTrip) {
  EXPECT_EQ(decode_hello(encode_hello({0})), Hello{0});
  EXPECT_EQ(decode_hello(encode_hello({0x0123456789abcdefull})), Hello{0x0123456789abcdefull});
  EXPECT_EQ(decode_hello(encode_hello({77, true})), (Hello{77, true}));
  EXPECT_EQ(decode_ack(encode_ack(kUnbounded)), kUnbounded);
  EXPECT_EQ(decode_record(encode_record(make_nonces(7))), make_nonces(7));
}

TEST(SwitchFrames, LayoutIsLittleEndianWithMagicFirst) {
  auto f = encode_hello({0x0102});
  EXPECT_EQ(f[0], 0x54);  // 'T'
  EXPECT_EQ(f[4], kSwitchVersion);
  EXPECT_EQ(f[8], 0x02);
  EXPECT_EQ(f[9], 0x01);
}

TEST(SwitchFrames, EveryHeaderFieldIsChecked) {
  auto hello = encode_hello({5});
  for (size_t i = 0; i < 8; ++i) {  // magic, version, flags (an unknown flag bit is refused)
    auto bad = hello;
    bad[i] ^= 0x40;
    EXPECT_FALSE(decode_hello(bad).has_value()) << "byte " << i;
  }
  // A frame of one kind is never accepted as another.
  auto ack = encode_ack(5);
  EXPECT_FALSE(decode_hello(ack).has_value());
  EXPECT_FALSE(decode_ack(hello).has_value());
  // The TCP-ended flag belongs to HELLO alone: another frame with it is refused.
  auto ack_with_flag = ack;
  ack_with_flag[6] = kHelloTcpEnded;
  EXPECT_FALSE(decode_ack(ack_with_flag).has_value());
}

TEST(BytesLeftOnTcp, WhatThePeerWroteMinusWhatWasRead) {
  EXPECT_EQ(bytes_left_on_tcp(777, 500, 1000), 277u);
  EXPECT_EQ(bytes_left_on_tcp(500, 500, 1000), 0u);
  EXPECT_EQ(bytes_left_on_tcp(0, 0, 0), 0u);
}

TEST(BytesLeftOnTcp, AClaimOfFewerBytesThanWereReadIsImpossible) {
  EXPECT_FALSE(bytes_left_on_tcp(499, 500, 1000).has_value());
}

TEST(BytesLeftOnTcp, MoreThanTheCapIsRefused) {
  EXPECT_EQ(bytes_left_on_tcp(1500, 500, 1000), 1000u);
  EXPECT_FALSE(bytes_left_on_tcp(1501, 500, 1000).has_value());
  EXPECT_FALSE(bytes_left_on_tcp(kUnbounded, 0, 1u << 30).has_value());
}

TEST(CheckRecord, OursIsProven) {
  EXPECT_EQ(check_record(encode_record(make_nonces(2)), make_nonces(2)), RecordCheck::kProven);
}

TEST(CheckRecord, ApplicationBytesAreNotARecord) {
  std::array<uint8_t, kRecordSize> data{};
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>('a' + i % 26);
  EXPECT_EQ(check_record(data, make_nonces(3)), RecordCheck::kNotARecord);
  // A record whose header is damaged anywhere is not one either.
  auto record = encode_record(make_nonces(3));
  record[6] = 1;
  EXPECT_EQ(check_record(record, make_nonces(3)), RecordCheck::kNotARecord);
}

TEST(CheckRecord, EitherNonceDifferingIsAnotherConnection) {
  NoncePair ours = make_nonces(4);
  NoncePair other_client = ours, other_server = ours;
  other_client.client[15] ^= 1;
  other_server.server[0] ^= 1;
  EXPECT_EQ(check_record(encode_record(other_client), ours), RecordCheck::kOtherConnection);
  EXPECT_EQ(check_record(encode_record(other_server), ours), RecordCheck::kOtherConnection);
}

}  // namespace
}  // namespace tcp2rdma::preload
