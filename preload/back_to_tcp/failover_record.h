// The failover record: what each side writes first on TCP when the RDMA path failed (docs/protocol.md,
// "When the RDMA path fails"), as pure logic. It says how far this side has received the peer's stream
// and where its own ends, and which RDMA connection it speaks of.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "util/nonce_pair.h"

namespace tcp2rdma::preload {

inline constexpr uint32_t kFailoverMagic = 0x564f4654;  // "TFOV"
inline constexpr uint16_t kFailoverVersion = 1;
// magic u32, version u16, flags u16, received u64, sent u64, client nonce 16 B, server nonce 16 B;
// little-endian, no padding.
inline constexpr size_t kFailoverSize = 56;
inline constexpr uint16_t kFailoverWriteShut = 1;  // flags: our sending side was shut on the stream

struct FailoverRecord {
  uint64_t received = 0;  // the peer's stream is here up to this cursor
  uint64_t sent = 0;      // ours ends at this cursor
  bool write_shut = false;
  NoncePair nonces;
  bool operator==(const FailoverRecord&) const = default;
};

std::array<uint8_t, kFailoverSize> encode_failover(const FailoverRecord& record);
// The peer's record, or nullopt when it is not one for this connection: another magic or version,
// an unknown flag, or nonces other than `ours`.
std::optional<FailoverRecord> decode_failover(std::span<const uint8_t, kFailoverSize> bytes, const NoncePair& ours);

}  // namespace tcp2rdma::preload
