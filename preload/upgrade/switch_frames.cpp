#include "upgrade/switch_frames.h"

#include <cstring>

#include "util/little_endian.h"

namespace tcp2rdma::preload {
namespace {

// Every frame starts with magic u32, version u16 and a reserved u16 that must be zero, so that a later
// version can give it a meaning without an old receiver misreading it.
void put_header(uint8_t* p, uint32_t magic) {
  put32(p, magic);
  put16(p + 4, kSwitchVersion);
  put16(p + 6, 0);
}
bool header_ok(const uint8_t* p, uint32_t magic) {
  return get_le(p, 4) == magic && get_le(p + 4, 2) == kSwitchVersion && get_le(p + 6, 2) == 0;
}

}  // namespace

std::array<uint8_t, kHelloSize> encode_hello(const Hello& hello) {
  std::array<uint8_t, kHelloSize> f{};
  put_header(f.data(), kHelloMagic);
  put16(f.data() + 6, hello.tcp_ended ? kHelloTcpEnded : 0);
  put64(f.data() + 8, hello.tcp_bytes);
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

std::optional<Hello> decode_hello(std::span<const uint8_t, kHelloSize> f) {
  uint64_t flags = get_le(f.data() + 6, 2);
  if (get_le(f.data(), 4) != kHelloMagic || get_le(f.data() + 4, 2) != kSwitchVersion || (flags & ~kHelloTcpEnded) != 0) {
    return std::nullopt;
  }
  return Hello{get_le(f.data() + 8, 8), flags == kHelloTcpEnded};
}

std::optional<uint64_t> decode_ack(std::span<const uint8_t, kAckSize> f) {
  if (!header_ok(f.data(), kAckMagic)) return std::nullopt;
  return get_le(f.data() + 8, 8);
}

std::optional<NoncePair> decode_record(std::span<const uint8_t, kRecordSize> f) {
  if (!header_ok(f.data(), kRecordMagic)) return std::nullopt;
  NoncePair n;
  std::memcpy(n.client.data(), f.data() + 8, n.client.size());
  std::memcpy(n.server.data(), f.data() + 24, n.server.size());
  return n;
}

std::optional<uint64_t> bytes_left_on_tcp(uint64_t peer_tcp_bytes, uint64_t received, uint64_t cap) {
  if (peer_tcp_bytes < received || peer_tcp_bytes - received > cap) return std::nullopt;
  return peer_tcp_bytes - received;
}

RecordCheck check_record(std::span<const uint8_t, kRecordSize> bytes, const NoncePair& ours) {
  std::optional<NoncePair> got = decode_record(bytes);
  if (!got.has_value()) return RecordCheck::kNotARecord;
  return *got == ours ? RecordCheck::kProven : RecordCheck::kOtherConnection;
}

}  // namespace tcp2rdma::preload
