// What crosses the wire at setup and in immediate data (docs/protocol.md). Fixed layouts with static
// asserts; little-endian hosts only (x86-64), which the setup magic would expose otherwise.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tcp2rdma::transport {

inline constexpr uint16_t kSetupMagic = 0x7452;  // "Rt"
inline constexpr uint8_t kProtocolVersion = 1;

// In the private data of the connect request and of the accept: where to write, from where to count.
// The mailbox sits right after the ring in the same registration.
struct [[gnu::packed]] SetupInfo {
  uint16_t magic;
  uint8_t version;
  uint8_t ring_size_log2;
  uint32_t rkey;
  uint64_t ring_addr;
  uint64_t first_byte;     // this side's stream starts here (random)
  uint16_t posted;         // receives posted before the connection was established
  uint16_t queue_depth;    // bound on posted receives
};
static_assert(sizeof(SetupInfo) == 28, "private data layout is part of the protocol");

inline constexpr size_t kMailboxSize = 56;  // seq, consumed, posted, armed, seen_consumed, seen_posted, seq

// Immediate data: bits 30-31 the message type, bits 0-29 its argument: the byte count of data, the
// arm count (low 30 bits) a wakeup answers or an arm raises, 0 for close and 1 for abort.
enum class MessageType : uint32_t { kData = 0, kWakeup = 1, kArm = 2, kEnd = 3 };
inline constexpr uint32_t kEndClose = 0;
inline constexpr uint32_t kEndAbort = 1;
inline constexpr uint32_t kImmArgMask = (uint32_t{1} << 30) - 1;
inline constexpr uint32_t encode_imm(MessageType type, uint32_t arg) {
  return (static_cast<uint32_t>(type) << 30) | (arg & kImmArgMask);
}
inline constexpr MessageType imm_type(uint32_t imm) { return static_cast<MessageType>(imm >> 30); }
inline constexpr uint32_t imm_arg(uint32_t imm) { return imm & kImmArgMask; }

}  // namespace tcp2rdma::transport
