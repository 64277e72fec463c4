// The frames and checks of the byte-exact switch of a TCP connection onto RDMA, as pure logic: no
// sockets, no verbs, no clocks. docs/architecture.md ("The byte-exact switch") is the protocol.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "util/nonce_pair.h"

namespace tcp2rdma::preload {

// HELLO and ACK, the first bytes of each side's RDMA stream; and the record written on TCP right
// after the last application byte sent over TCP. Little-endian, fixed size, no padding.
inline constexpr uint32_t kHelloMagic = 0x4f4c4854;   // "THLO"
inline constexpr uint32_t kAckMagic = 0x4b434154;     // "TACK"
inline constexpr uint32_t kRecordMagic = 0x43455254;  // "TREC"
inline constexpr uint16_t kSwitchVersion = 1;
inline constexpr size_t kHelloSize = 16;   // magic u32, version u16, flags u16, tcp_bytes u64
inline constexpr size_t kAckSize = 16;     // magic u32, version u16, reserved u16, acked_tcp_bytes u64
inline constexpr size_t kRecordSize = 40;  // magic u32, version u16, reserved u16, client nonce, server nonce

// What a side says in its HELLO: the application bytes it wrote on TCP before it froze, and whether
// its TCP sending side ended right after them (the application shut it down: no record follows, the
// TCP end marks the boundary instead). Only a server may say so (architecture.md).
struct Hello {
  uint64_t tcp_bytes = 0;
  bool tcp_ended = false;
  bool operator==(const Hello&) const = default;
};
inline constexpr uint16_t kHelloTcpEnded = 1;  // HELLO's flags; every other bit must be zero

std::array<uint8_t, kHelloSize> encode_hello(const Hello& hello);
std::array<uint8_t, kAckSize> encode_ack(uint64_t acked_tcp_bytes);
std::array<uint8_t, kRecordSize> encode_record(const NoncePair& nonces);
std::optional<Hello> decode_hello(std::span<const uint8_t, kHelloSize> frame);
std::optional<uint64_t> decode_ack(std::span<const uint8_t, kAckSize> frame);
std::optional<NoncePair> decode_record(std::span<const uint8_t, kRecordSize> frame);

// The peer's HELLO said it wrote `peer_tcp_bytes` application bytes to TCP before it froze; the
// application here has read `received` of them. The rest are still to be read from TCP (before the
// peer's record) and kept for the application: how many, or nullopt when the claim cannot be true
// (fewer than were already read) or is more than `cap`, what one TCP connection can have in flight.
std::optional<uint64_t> bytes_left_on_tcp(uint64_t peer_tcp_bytes, uint64_t received, uint64_t cap);

// What the kRecordSize bytes found on TCP right after the peer's last application byte are.
enum class RecordCheck {
  kProven,          // the peer's record with this RDMA connection's nonces: the stream is the peer's
  kNotARecord,      // no record at all: whoever holds the RDMA connection could not write into our
                    // TCP stream, so it is not our peer
  kOtherConnection  // a record, but with other nonces
};
RecordCheck check_record(std::span<const uint8_t, kRecordSize> bytes, const NoncePair& ours);

}  // namespace tcp2rdma::preload
