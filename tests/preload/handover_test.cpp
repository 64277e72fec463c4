#include "handover.h"

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

TEST(HandoverFrames, RoundTrip) {
  EXPECT_EQ(decode_hello(encode_hello(0)), 0u);
  EXPECT_EQ(decode_hello(encode_hello(0x0123456789abcdefull)), 0x0123456789abcdefull);
  EXPECT_EQ(decode_ack(encode_ack(kUnbounded)), kUnbounded);
  EXPECT_EQ(decode_record(encode_record(make_nonces(7))), make_nonces(7));
}

TEST(HandoverFrames, LayoutIsLittleEndianWithMagicFirst) {
  auto f = encode_hello(0x0102);
  EXPECT_EQ(f[0], 0x54);  // 'T'
  EXPECT_EQ(f[4], kHandoverVersion);
  EXPECT_EQ(f[8], 0x02);
  EXPECT_EQ(f[9], 0x01);
}

TEST(HandoverFrames, EveryHeaderFieldIsChecked) {
  auto hello = encode_hello(5);
  for (size_t i = 0; i < 8; ++i) {  // magic, version, reserved
    auto bad = hello;
    bad[i] ^= 0x40;
    EXPECT_FALSE(decode_hello(bad).has_value()) << "byte " << i;
  }
  // A frame of one kind is never accepted as another.
  auto ack = encode_ack(5);
  EXPECT_FALSE(decode_hello(ack).has_value());
  EXPECT_FALSE(decode_ack(hello).has_value());
}

TEST(InboundHandover, UnboundedUntilHello) {
  InboundHandover in(make_nonces(1));
  EXPECT_EQ(in.tcp_read_limit(), kUnbounded);
  EXPECT_EQ(in.on_tcp_delivered(1000), InboundHandover::Verdict::kOk);
  EXPECT_EQ(in.state(), InboundHandover::State::kTcp);
}

TEST(InboundHandover, BoundedByHelloThenRecordThenRdma) {
  NoncePair nonces = make_nonces(2);
  InboundHandover in(nonces);
  ASSERT_EQ(in.on_tcp_delivered(100), InboundHandover::Verdict::kOk);
  ASSERT_EQ(in.on_hello(250), InboundHandover::Verdict::kOk);
  EXPECT_EQ(in.state(), InboundHandover::State::kBounded);
  EXPECT_EQ(in.tcp_read_limit(), 150u);
  EXPECT_EQ(in.on_tcp_delivered(151), InboundHandover::Verdict::kProtocolError);  // past the bound
  ASSERT_EQ(in.on_tcp_delivered(149), InboundHandover::Verdict::kOk);
  EXPECT_EQ(in.tcp_read_limit(), 1u);
  ASSERT_EQ(in.on_tcp_delivered(1), InboundHandover::Verdict::kOk);
  EXPECT_EQ(in.state(), InboundHandover::State::kAtRecord);
  EXPECT_EQ(in.tcp_read_limit(), 0u);
  EXPECT_EQ(in.on_record(encode_record(nonces)), InboundHandover::RecordOutcome::kSwitchToRdma);
  EXPECT_EQ(in.state(), InboundHandover::State::kRdma);
  EXPECT_EQ(in.tcp_bytes_delivered(), 250u);
}

TEST(InboundHandover, HelloAtTheCurrentOffsetGoesStraightToTheRecord) {
  InboundHandover in(make_nonces(3));
  ASSERT_EQ(in.on_tcp_delivered(64), InboundHandover::Verdict::kOk);
  ASSERT_EQ(in.on_hello(64), InboundHandover::Verdict::kOk);
  EXPECT_EQ(in.state(), InboundHandover::State::kAtRecord);
}

TEST(InboundHandover, HelloClaimingLessThanDeliveredIsAProtocolError) {
  InboundHandover in(make_nonces(4));
  ASSERT_EQ(in.on_tcp_delivered(10), InboundHandover::Verdict::kOk);
  EXPECT_EQ(in.on_hello(9), InboundHandover::Verdict::kProtocolError);
  EXPECT_EQ(in.on_hello(10), InboundHandover::Verdict::kOk);
  EXPECT_EQ(in.on_hello(10), InboundHandover::Verdict::kProtocolError);  // only one HELLO
}

TEST(InboundHandover, ApplicationBytesWhereTheRecordShouldBeStayData) {
  InboundHandover in(make_nonces(5));
  ASSERT_EQ(in.on_hello(0), InboundHandover::Verdict::kOk);
  std::array<uint8_t, kRecordSize> data{};
  data.fill('x');
  EXPECT_EQ(in.on_record(data), InboundHandover::RecordOutcome::kBytesAreData);
  EXPECT_EQ(in.state(), InboundHandover::State::kTcpForever);
  EXPECT_EQ(in.tcp_read_limit(), kUnbounded);
  EXPECT_EQ(in.tcp_bytes_delivered(), kRecordSize);
}

TEST(InboundHandover, ARecordWithOtherNoncesAborts) {
  InboundHandover in(make_nonces(6));
  ASSERT_EQ(in.on_hello(0), InboundHandover::Verdict::kOk);
  NoncePair other = make_nonces(6);
  other.server[15] ^= 1;
  EXPECT_EQ(in.on_record(encode_record(other)), InboundHandover::RecordOutcome::kAbort);
}

TEST(InboundHandover, ARecordBeforeTheBoundAborts) {
  NoncePair nonces = make_nonces(8);
  InboundHandover in(nonces);
  EXPECT_EQ(in.on_record(encode_record(nonces)), InboundHandover::RecordOutcome::kAbort);
  ASSERT_EQ(in.on_hello(5), InboundHandover::Verdict::kOk);
  EXPECT_EQ(in.on_record(encode_record(nonces)), InboundHandover::RecordOutcome::kAbort);
}

TEST(OutboundHandover, HelloFreezesTheCountAndAckMustEchoIt) {
  OutboundHandover out;
  out.on_tcp_sent(4096);
  out.on_tcp_sent(1);
  auto hello = out.begin();
  EXPECT_EQ(decode_hello(hello), 4097u);
  EXPECT_EQ(out.state(), OutboundHandover::State::kHelloSent);
  EXPECT_EQ(out.on_ack(4096), OutboundHandover::Verdict::kProtocolError);
  EXPECT_EQ(out.on_ack(4097), OutboundHandover::Verdict::kOk);
  EXPECT_EQ(out.state(), OutboundHandover::State::kRdma);
  EXPECT_EQ(out.on_ack(4097), OutboundHandover::Verdict::kProtocolError);  // only one ACK
}

TEST(OutboundHandover, AckWithoutHelloIsAProtocolError) {
  OutboundHandover out;
  EXPECT_EQ(out.on_ack(0), OutboundHandover::Verdict::kProtocolError);
}

TEST(Handover, BothEndsAgreeOnEveryByte) {
  // One direction end to end: sender and receiver driven in the order the protocol allows.
  NoncePair nonces = make_nonces(9);
  OutboundHandover out;
  InboundHandover in(nonces);
  out.on_tcp_sent(777);
  ASSERT_EQ(in.on_tcp_delivered(500), InboundHandover::Verdict::kOk);  // receiver lags behind
  auto hello = decode_hello(out.begin());
  ASSERT_TRUE(hello.has_value());
  ASSERT_EQ(in.on_hello(*hello), InboundHandover::Verdict::kOk);
  auto ack = decode_ack(encode_ack(*hello));
  ASSERT_EQ(out.on_ack(*ack), OutboundHandover::Verdict::kOk);
  ASSERT_EQ(in.on_tcp_delivered(in.tcp_read_limit()), InboundHandover::Verdict::kOk);
  EXPECT_EQ(in.on_record(encode_record(nonces)), InboundHandover::RecordOutcome::kSwitchToRdma);
  EXPECT_EQ(in.tcp_bytes_delivered(), out.tcp_bytes_sent());
}

}  // namespace
}  // namespace tcp2rdma::preload
