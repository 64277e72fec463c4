#include "handover.h"

#include <cstring>
#include <limits>

namespace tcp2rdma::preload {
namespace {

void put16(uint8_t* p, uint16_t v) {
  for (int i = 0; i < 2; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t get(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Every frame starts with magic u32, version u16 and a reserved u16 that must be zero, so that a later
// version can give it a meaning without an old receiver misreading it.
void put_header(uint8_t* p, uint32_t magic) {
  put32(p, magic);
  put16(p + 4, kHandoverVersion);
  put16(p + 6, 0);
}
bool header_ok(const uint8_t* p, uint32_t magic) {
  return get(p, 4) == magic && get(p + 4, 2) == kHandoverVersion && get(p + 6, 2) == 0;
}

}  // namespace

std::array<uint8_t, kHelloSize> encode_hello(uint64_t tcp_bytes) {
  std::array<uint8_t, kHelloSize> f{};
  put_header(f.data(), kHelloMagic);
  put64(f.data() + 8, tcp_bytes);
  return f;
}

std::array<uint8_t, kAckSize> encode_ack(uint64_t acked_tcp_bytes) {
  std::array<uint8_t, kAckSize> f{};
  put_header(f.data(), kAckMagic);
  put64(f.data() + 8, acked_tcp_bytes);
  return f;
}

std::array<uint8_t, kRecordSize> encode_record(const NoncePair& nonces) {
  std::array<uint8_t, kRecordSize> f{};
  put_header(f.data(), kRecordMagic);
  std::memcpy(f.data() + 8, nonces.client.data(), nonces.client.size());
  std::memcpy(f.data() + 24, nonces.server.data(), nonces.server.size());
  return f;
}

std::optional<uint64_t> decode_hello(std::span<const uint8_t, kHelloSize> f) {
  if (!header_ok(f.data(), kHelloMagic)) return std::nullopt;
  return get(f.data() + 8, 8);
}

std::optional<uint64_t> decode_ack(std::span<const uint8_t, kAckSize> f) {
  if (!header_ok(f.data(), kAckMagic)) return std::nullopt;
  return get(f.data() + 8, 8);
}

std::optional<NoncePair> decode_record(std::span<const uint8_t, kRecordSize> f) {
  if (!header_ok(f.data(), kRecordMagic)) return std::nullopt;
  NoncePair n;
  std::memcpy(n.client.data(), f.data() + 8, n.client.size());
  std::memcpy(n.server.data(), f.data() + 24, n.server.size());
  return n;
}

uint64_t InboundHandover::tcp_read_limit() const {
  switch (state_) {
    case State::kTcp:
    case State::kTcpForever:
      return std::numeric_limits<uint64_t>::max();
    case State::kBounded:
      return bound_ - delivered_;
    case State::kAtRecord:
    case State::kRdma:
      return 0;
  }
  return 0;
}

InboundHandover::Verdict InboundHandover::on_hello(uint64_t peer_tcp_bytes) {
  if (state_ != State::kTcp || peer_tcp_bytes < delivered_) return Verdict::kProtocolError;
  bound_ = peer_tcp_bytes;
  state_ = bound_ == delivered_ ? State::kAtRecord : State::kBounded;
  return Verdict::kOk;
}

InboundHandover::Verdict InboundHandover::on_tcp_delivered(uint64_t n) {
  if (n > tcp_read_limit()) return Verdict::kProtocolError;
  delivered_ += n;
  if (state_ == State::kBounded && delivered_ == bound_) state_ = State::kAtRecord;
  return Verdict::kOk;
}

InboundHandover::RecordOutcome InboundHandover::on_record(std::span<const uint8_t, kRecordSize> bytes) {
  if (state_ != State::kAtRecord) return RecordOutcome::kAbort;
  std::optional<NoncePair> got = decode_record(bytes);
  if (!got.has_value()) {
    state_ = State::kTcpForever;
    delivered_ += kRecordSize;
    return RecordOutcome::kBytesAreData;
  }
  if (*got != nonces_) return RecordOutcome::kAbort;
  state_ = State::kRdma;
  return RecordOutcome::kSwitchToRdma;
}

std::array<uint8_t, kHelloSize> OutboundHandover::begin() {
  state_ = State::kHelloSent;
  return encode_hello(sent_);
}

OutboundHandover::Verdict OutboundHandover::on_ack(uint64_t acked_tcp_bytes) {
  if (state_ != State::kHelloSent || acked_tcp_bytes != sent_) return Verdict::kProtocolError;
  state_ = State::kRdma;
  return Verdict::kOk;
}

}  // namespace tcp2rdma::preload
