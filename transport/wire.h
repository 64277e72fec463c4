// What crosses the wire at setup and in immediate data (docs/protocol.md). Fixed layouts with static
// asserts; every integer little-endian (x86-64 hosts only; a big-endian peer fails the magic check).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tcp2rdma::transport {

inline constexpr uint16_t kSetupMagic = 0x7452;  // "Rt"
// 4: the mailbox carries ring moves; 5: a channel's open carries the client's first bytes on the
// stream (docs/links.md, "Short-lived connections") and setup records are 96 bytes; 6: a "to TCP"
// may say that the mover's side asks to go back to RDMA at once (kEndToTcpReturning).
inline constexpr uint8_t kProtocolVersion = 6;

// The TCP connection a stream belongs to, as its client sees it. IPv4 addresses sit in the first four
// bytes of the 16 and the rest is zero.
struct [[gnu::packed]] TcpTuple {
  uint8_t family;  // AF_INET or AF_INET6
  uint8_t reserved;
  uint16_t client_port;  // host order
  uint16_t server_port;
  uint8_t client_addr[16];
  uint8_t server_addr[16];
};
static_assert(sizeof(TcpTuple) == 38);

// The private data of the connect request. rdma_cm leaves 56 bytes of the CM REQ for it, so the ring
// is addressed from zero (registered with iova 0: no address to send) and each stream's first cursor
// is derived from the two nonces (stream_cursor_origin) instead of being sent.
struct [[gnu::packed]] ConnectRequest {
  uint16_t magic;
  uint8_t version;
  uint8_t ring_size_log2;  // 10..30
  uint32_t rkey;           // of the client's ring, then its mailbox at offset 2^ring_size_log2
  uint8_t queue_depth;     // receives the client posted before connecting (all of them)
  // The largest ring the client will write into (its bounce buffer mirrors it, pinned): the server
  // keeps its own ring to it. 0 (an older client): not said; a larger ring is then refused by the client.
  uint8_t max_server_ring_log2;
  TcpTuple tuple;
  uint64_t client_nonce;
};
static_assert(sizeof(ConnectRequest) == 56, "exactly the 56 bytes rdma_cm leaves in a connect request");

// The private data of the accept.
struct [[gnu::packed]] AcceptReply {
  uint16_t magic;
  uint8_t version;
  uint8_t ring_size_log2;
  uint32_t rkey;
  uint8_t queue_depth;
  uint8_t reserved[7];
  uint64_t client_nonce;  // echoed: the client checks it is the answer to its own request
  uint64_t server_nonce;
};
static_assert(sizeof(AcceptReply) == 32);

// The private data of a rejection that sends the client to another port of the same address: the
// listener on a pre-fork server's well-known port answers so for a connection that another process
// of that server accepted, which listens there (docs/protocol.md, "Redirect").
inline constexpr uint8_t kRedirectKind = 1;
struct [[gnu::packed]] Redirect {
  uint16_t magic;
  uint8_t version;
  uint8_t kind;    // kRedirectKind
  uint16_t port;   // host order: the rdma_cm port to ask instead
  uint8_t reserved[2];
  uint64_t client_nonce;  // echoed: the client checks it answers its own request
};
static_assert(sizeof(Redirect) == 16);

// The private data of a rejection that says why the server keeps this connection off RDMA (it stays
// TCP), so that the client can say so instead of "no listener" (docs/protocol.md, "Decline"). The
// same layout as a Redirect; a client built before it reads an unknown kind: a plain rejection.
inline constexpr uint8_t kDeclineKind = 2;
enum class DeclineReason : uint8_t {
  kNone = 0,            // no record: no listener, or a plain rejection
  kServerStaysTcp = 1,  // the server keeps the connection on TCP (its rules or its own state)
  kBusy = 2,            // too many upgrades under way in the server's process
  kExpired = 3,         // the server's application did not accept the TCP connection within the hold
  kTooLate = 4,         // the server's upgrade of the connection had stopped waiting for the request
  kDuplicate = 5,       // two requests named this connection
  kRingTooLarge = 6,    // the client's ring is larger than the server mirrors
  kPinLimit = 7,        // the server may pin no more (transport/pin_budget.h)
  kMemoryLock = 8,      // the server could not register memory
  kResources = 9,       // the server could not make RDMA resources or descriptors
};
inline constexpr uint8_t kLastDeclineReason = 9;
struct [[gnu::packed]] Decline {
  uint16_t magic;
  uint8_t version;
  uint8_t kind;    // kDeclineKind
  uint8_t reason;  // a DeclineReason; an unknown one reads as kServerStaysTcp
  uint8_t reserved[3];
  uint64_t client_nonce;  // echoed: the client checks it answers its own request
};
static_assert(sizeof(Decline) == 16 && sizeof(Decline) == sizeof(Redirect));

// Where each direction's byte cursor starts: a mix of both nonces, so neither side can choose it alone
// and wraparound past 2^64 is an ordinary event in practice, not a special case.
inline uint64_t stream_cursor_origin(uint64_t client_nonce, uint64_t server_nonce, bool client_to_server) {
  uint64_t x = client_nonce * 0x9e3779b97f4a7c15ull ^ server_nonce ^ (client_to_server ? 0x6a09e667f3bcc908ull : 0);
  x ^= x >> 29;
  x *= 0xbf58476d1ce4e5b9ull;
  return x ^ (x >> 32);
}

// A side's mailbox update, written by the peer into the 96-byte slot after our first ring (where it
// stays when the ring moves). seq is written at both ends: equal means the record is whole (an RDMA
// Write may land in any order). Ring moves (docs/links.md, "Rings that grow and shrink"): the writer of the
// record offers the reader a ring for the reader's stream (the generation, its rkey and size; the
// first ring is generation 0), and answers the reader's latest offer (moved_gen, with bit 63 for a
// refusal; adopted, moved_at is the cursor from which its bytes go into the offered ring).
struct [[gnu::packed]] MailboxRecord {
  uint64_t seq;
  uint64_t consumed;
  uint64_t posted;
  uint64_t armed;
  uint64_t seen_consumed;
  uint64_t seen_posted;
  uint64_t ring_gen;
  uint32_t ring_rkey;
  uint8_t ring_size_log2;
  uint8_t reserved[3];
  uint64_t moved_gen;
  uint64_t moved_at;
  uint64_t seq_end;
};
static_assert(sizeof(MailboxRecord) == 88);
inline constexpr size_t kMailboxSize = sizeof(MailboxRecord);

// Immediate data (docs/protocol.md "Messages"): bits 30-31 the message type, bits 16-29 the
// receiver's channel index on the link, bits 0-15 an argument. A data message's length is its
// completion's byte_len, which the verbs report for a Write with immediate; the argument repeats its
// low 16 bits, a check that costs nothing. A wakeup's argument is the low 16 bits of the arm count it
// answers (one arm is outstanding at a time). An end's: 0 close, 1 abort, 2 "to TCP" (the sender's
// bytes go on on the TCP connection from here; docs/protocol.md, "Back to TCP"), 3 release, 4 an
// abort that asks again, 5 "to TCP" from a side whose process will wait for the connection's return to
// RDMA at once (docs/architecture.md, "Back to RDMA"), 6 close and release in one.
enum class MessageType : uint32_t { kData = 0, kWakeup = 1, kArm = 2, kEnd = 3 };
inline constexpr uint32_t kEndClose = 0;
inline constexpr uint32_t kEndAbort = 1;
inline constexpr uint32_t kEndToTcp = 2;
inline constexpr uint32_t kEndRelease = 3;  // the sender writes nothing more into this channel (links.md)
// An abort from a server before its HELLO that asks the client to ask again: the server's process
// forked before the switch, and the upgrade went on with the connection to the process that uses it
// next, whose listener a new request reaches (docs/protocol.md, "End of a stream").
inline constexpr uint32_t kEndAskAgain = 4;
// "to TCP", and the cause of the move is gone as soon as it is done (a change of credentials: the
// process goes on using the connection): the peer may ask for the return at its next call.
inline constexpr uint32_t kEndToTcpReturning = 5;
// A close and the release in one message, on the receive the peer keeps for the release: sent by a
// side that closes while the peer has given it no receive for its close (docs/protocol.md, "End of
// a stream"); what the peer reads of it is a close followed by a release.
inline constexpr uint32_t kEndCloseRelease = 6;
// Whether an end message with this argument is its sender's release (alone, or with its close).
inline constexpr bool is_release(uint32_t end) { return end == kEndRelease || end == kEndCloseRelease; }
inline constexpr uint32_t kImmArgBits = 16;
inline constexpr uint32_t kImmArgMask = (uint32_t{1} << kImmArgBits) - 1;
inline constexpr uint32_t kChannelBits = 14;
inline constexpr uint32_t kMaxChannels = uint32_t{1} << kChannelBits;  // indices 0..kMaxChannels-1
// Index 0 names the link itself; a link's first channel (the one its rdma_cm connection was made
// for) is 1 on both sides.
inline constexpr uint32_t kLinkChannel = 0;
inline constexpr uint32_t kFirstChannel = 1;
inline constexpr uint32_t encode_imm(MessageType type, uint32_t channel, uint32_t arg) {
  return (static_cast<uint32_t>(type) << 30) | ((channel & (kMaxChannels - 1)) << kImmArgBits) | (arg & kImmArgMask);
}
inline constexpr MessageType imm_type(uint32_t imm) { return static_cast<MessageType>(imm >> 30); }
inline constexpr uint32_t imm_channel(uint32_t imm) { return (imm >> kImmArgBits) & (kMaxChannels - 1); }
inline constexpr uint32_t imm_arg(uint32_t imm) { return imm & kImmArgMask; }

// Messages of the link itself (channel index kLinkChannel): an RDMA Write with immediate of one
// 96-byte record into a slot of the peer's setup area (after the first channel's ring and mailbox, in
// that registration), whose immediate's argument says what it is (bits 12-15) and which slot (bits
// 0-11). The client opens a channel with a ChannelOpen in slot s; the server answers in the client's
// slot s with a ChannelAnswer (docs/links.md, "Opening a channel on a live link").
inline constexpr uint32_t kLinkOpen = 1;
inline constexpr uint32_t kLinkAnswer = 2;
inline constexpr uint32_t kSetupSlots = 64;     // opens a client may have unanswered on a link
inline constexpr uint32_t kSetupRecord = 96;    // bytes a slot
inline constexpr uint32_t kSetupArea = kSetupSlots * kSetupRecord;
inline constexpr uint32_t link_imm_arg(uint32_t op, uint32_t slot) { return op << 12 | (slot & 0xfff); }
inline constexpr uint32_t link_op(uint32_t arg) { return arg >> 12; }
inline constexpr uint32_t link_slot(uint32_t arg) { return arg & 0xfff; }

inline constexpr uint8_t kOpenKind = 1;
inline constexpr uint8_t kAcceptKind = 2;
inline constexpr uint8_t kRefuseKind = 3;
// A new stream on a live link: what a ConnectRequest says, plus the client's index of the channel and
// the stream's first bytes from the client (at most kOpenFirstBytes, none when first_length is 0):
// the server's stream reads them ahead of anything the client writes into its ring, so that a client
// saves a round trip on what it says first (the switch's HELLO: docs/links.md, "Short-lived
// connections"). They count in neither side's ring cursors.
inline constexpr uint32_t kOpenFirstBytes = 16;
struct [[gnu::packed]] ChannelOpen {
  uint16_t magic;
  uint8_t version;
  uint8_t kind;  // kOpenKind
  uint8_t ring_size_log2;
  uint8_t max_server_ring_log2;
  uint8_t queue_depth;
  uint8_t first_length;     // 0..kOpenFirstBytes
  uint32_t rkey;            // of the client's ring for this channel, then its mailbox
  uint16_t client_channel;  // where the server's messages for this channel go
  uint8_t reserved2[2];
  TcpTuple tuple;
  uint64_t client_nonce;
  uint8_t pad[2];
  uint8_t first_bytes[kOpenFirstBytes];
  uint8_t pad2[16];
};
static_assert(sizeof(ChannelOpen) == kSetupRecord);

// The server's answer: an accept (its ring and index), or a refusal with a DeclineReason.
struct [[gnu::packed]] ChannelAnswer {
  uint16_t magic;
  uint8_t version;
  uint8_t kind;  // kAcceptKind or kRefuseKind
  uint8_t ring_size_log2;
  uint8_t queue_depth;
  uint8_t reason;  // a refusal's DeclineReason
  uint8_t reserved;
  uint32_t rkey;
  uint16_t server_channel;
  uint16_t client_channel;  // echoed
  uint64_t client_nonce;    // echoed
  uint64_t server_nonce;
  uint16_t redirect_port;   // a refusal that sends the client to another port (a pre-fork server's
                            // worker: docs/protocol.md, "Redirect"); 0 otherwise
  uint8_t pad[62];
};
static_assert(sizeof(ChannelAnswer) == kSetupRecord);

}  // namespace tcp2rdma::transport
