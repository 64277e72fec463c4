// The byte-exact switch of one TCP connection's two directions onto RDMA, as pure logic: no sockets,
// no verbs, no clocks. The preload layer feeds it what happened and asks it what it may do next.
// docs/architecture.md ("The upgrade and the byte-exact handover") is the protocol this implements.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace tcp2rdma::preload {

using Nonce = std::array<uint8_t, 16>;

// The two nonces of one RDMA connection: the client's from its connect private data, the server's
// from its accept private data. Both ends hold the same pair once the RC connection is established.
struct NoncePair {
  Nonce client{};
  Nonce server{};
  bool operator==(const NoncePair&) const = default;
};

// Preamble frames, the first bytes of each side's RDMA stream; and the record written on TCP right
// after the last application byte sent over TCP. Little-endian, fixed size, no padding.
inline constexpr uint32_t kHelloMagic = 0x4f4c4854;   // "THLO"
inline constexpr uint32_t kAckMagic = 0x4b434154;     // "TACK"
inline constexpr uint32_t kRecordMagic = 0x43455254;  // "TREC"
inline constexpr uint16_t kHandoverVersion = 1;
inline constexpr size_t kHelloSize = 16;   // magic u32, version u16, reserved u16, tcp_bytes u64
inline constexpr size_t kAckSize = 16;     // magic u32, version u16, reserved u16, acked_tcp_bytes u64
inline constexpr size_t kRecordSize = 40;  // magic u32, version u16, reserved u16, client nonce, server nonce

std::array<uint8_t, kHelloSize> encode_hello(uint64_t tcp_bytes);
std::array<uint8_t, kAckSize> encode_ack(uint64_t acked_tcp_bytes);
std::array<uint8_t, kRecordSize> encode_record(const NoncePair& nonces);
std::optional<uint64_t> decode_hello(std::span<const uint8_t, kHelloSize> frame);
std::optional<uint64_t> decode_ack(std::span<const uint8_t, kAckSize> frame);
std::optional<NoncePair> decode_record(std::span<const uint8_t, kRecordSize> frame);

// The receiving half: which bytes the application may still take from TCP, and when the stream
// continues on RDMA.
class InboundHandover {
 public:
  enum class State {
    kTcp,        // no bound known: every TCP byte is application data (the peer writes no record yet)
    kBounded,    // the peer's HELLO said how many application bytes come on TCP; deliver up to there
    kAtRecord,   // all of them delivered; the next kRecordSize TCP bytes are the handover record
    kRdma,       // record verified: the stream continues on RDMA
    kTcpForever  // record did not verify: this RDMA connection is not our peer's; stay on TCP
  };
  enum class Verdict { kOk, kProtocolError };

  explicit InboundHandover(const NoncePair& nonces) : nonces_(nonces) {}

  State state() const { return state_; }
  uint64_t tcp_bytes_delivered() const { return delivered_; }

  // Most bytes a read may take from TCP now without reaching past the application's data.
  uint64_t tcp_read_limit() const;

  // The peer's HELLO arrived over RDMA. It may not claim fewer bytes than were already delivered.
  Verdict on_hello(uint64_t peer_tcp_bytes);

  // n application bytes were handed to the application from TCP (never more than tcp_read_limit()).
  Verdict on_tcp_delivered(uint64_t n);

  enum class RecordOutcome {
    kSwitchToRdma,    // our peer's record with this connection's nonces
    kBytesAreData,    // not a record at all: whoever holds the RDMA connection could not write into
                      // our TCP stream, so it is not our peer; the bytes are application data and the
                      // connection stays TCP
    kAbort            // a record with other nonces, or at the wrong time: never guess, reset
  };
  // The kRecordSize bytes read from TCP at the boundary (state kAtRecord).
  RecordOutcome on_record(std::span<const uint8_t, kRecordSize> bytes);

 private:
  NoncePair nonces_;
  State state_ = State::kTcp;
  uint64_t delivered_ = 0;
  uint64_t bound_ = 0;
};

// The sending half: when application bytes must stop going to TCP, and when the record may be written.
class OutboundHandover {
 public:
  enum class State {
    kTcp,         // application bytes go to TCP
    kHelloSent,   // HELLO{tcp_bytes} sent on RDMA; application writes wait for the peer's ACK
    kRdma         // ACK read, record written to TCP: application bytes go to RDMA
  };
  enum class Verdict { kOk, kProtocolError };

  OutboundHandover() = default;

  State state() const { return state_; }
  uint64_t tcp_bytes_sent() const { return sent_; }

  void on_tcp_sent(uint64_t n) { sent_ += n; }  // only in kTcp
  // Freezes the TCP byte count and returns the HELLO to send as the first bytes on RDMA.
  std::array<uint8_t, kHelloSize> begin();
  // The peer acknowledged our HELLO; it must echo exactly our count. Then the record goes on TCP.
  Verdict on_ack(uint64_t acked_tcp_bytes);

 private:
  State state_ = State::kTcp;
  uint64_t sent_ = 0;
};

}  // namespace tcp2rdma::preload
