// The failover record (back_to_tcp/failover_record.h): its layout, and that nothing but this
// connection's record of this version is taken for one.
#include "back_to_tcp/failover_record.h"

#include <gtest/gtest.h>

namespace tcp2rdma::preload {
namespace {

FailoverRecord sample() {
  FailoverRecord r;
  r.received = 0x0102030405060708ull;
  r.sent = UINT64_MAX - 5;  // cursors wrap: any value is a cursor
  r.write_shut = true;
  for (int i = 0; i < 16; ++i) {
    r.nonces.client[i] = static_cast<uint8_t>(i + 1);
    r.nonces.server[i] = static_cast<uint8_t>(0xf0 + i);
  }
  return r;
}

TEST(FailoverRecord, RoundTrip) {
  FailoverRecord r = sample();
  auto bytes = encode_failover(r);
  auto back = decode_failover(bytes, r.nonces);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, r);
  r.write_shut = false;
  bytes = encode_failover(r);
  ASSERT_TRUE(decode_failover(bytes, r.nonces).has_value());
  EXPECT_FALSE(decode_failover(bytes, r.nonces)->write_shut);
}

TEST(FailoverRecord, LayoutIsLittleEndianWithMagicFirst) {
  auto bytes = encode_failover(sample());
  EXPECT_EQ(std::string(bytes.begin(), bytes.begin() + 4), "TFOV");
  EXPECT_EQ(bytes[4], 1);  // version
  EXPECT_EQ(bytes[5], 0);
  EXPECT_EQ(bytes[6], 1);  // flags: write shut
  EXPECT_EQ(bytes[8], 0x08);   // received, lowest byte first
  EXPECT_EQ(bytes[15], 0x01);
  EXPECT_EQ(bytes[16], 0xfa);  // sent
  EXPECT_EQ(bytes[24], 1);     // client nonce
  EXPECT_EQ(bytes[40], 0xf0);  // server nonce
}

TEST(FailoverRecord, OnlyThisConnectionsRecordOfThisVersionIsTaken) {
  FailoverRecord r = sample();
  const auto good = encode_failover(r);
  for (size_t at : {size_t{0}, size_t{3}, size_t{4}, size_t{5}, size_t{7}, size_t{24}, size_t{39}, size_t{40}, size_t{55}}) {
    auto bad = good;
    bad[at] ^= 0x40;  // magic, version, an unknown flag, either nonce
    EXPECT_FALSE(decode_failover(bad, r.nonces).has_value()) << "byte " << at;
  }
  NoncePair other = r.nonces;
  other.server[0] ^= 1;
  EXPECT_FALSE(decode_failover(good, other).has_value());
  // Application bytes are never a record.
  std::array<uint8_t, kFailoverSize> zeros{};
  EXPECT_FALSE(decode_failover(zeros, r.nonces).has_value());
}

}  // namespace
}  // namespace tcp2rdma::preload
