// When the RDMA path fails, the connection goes on over TCP at the exact byte offset (docs/protocol.md,
// "When the RDMA path fails"): each side tells the other, on TCP, how far it has received the other's
// stream and where its own ends. This is the arithmetic of that exchange, pure: which of our bytes the
// peer still needs, how many of its bytes are coming, and whether what the peer says is possible.
// Cursors wrap modulo 2^64 as everywhere in the stream: only differences are compared.
#pragma once

#include <cstdint>

namespace tcp2rdma::transport {

// Our sending side at the failure.
struct SentCursors {
  uint64_t peer_consumed;  // the peer's application had read everything before this (its last update)
  uint64_t retained_from;  // we still hold every byte from here to `sent` (the bounce mirror)
  uint64_t sent;           // our stream ends here
};

// Our receiving side at the failure.
struct ReceivedCursors {
  uint64_t consumed;   // our application has read everything before this
  uint64_t received;   // the peer's stream is here, read or not, up to this
  uint64_t ring_size;  // the peer never sends further past `consumed` than this
};

enum class FailoverError {
  kNone,
  kReceivedImpossible,  // the peer claims to have received before what it consumed, or beyond what we sent
  kNotRetained,         // the peer needs bytes we no longer hold (zero-copy, acknowledged, unconsumed)
  kSentImpossible,      // the peer's stream ends before what we received, or beyond our ring
};
const char* to_string(FailoverError e);

// The peer has our stream up to `peer_received`: *resend is how many bytes we send again on TCP, from
// there to the end of what we sent.
FailoverError bytes_to_resend(const SentCursors& ours, uint64_t peer_received, uint64_t* resend);
// The peer's stream ends at `peer_sent`: *coming is how many of its bytes it sends again on TCP, before
// anything its application writes from now on.
FailoverError bytes_coming(const ReceivedCursors& ours, uint64_t peer_sent, uint64_t* coming);

}  // namespace tcp2rdma::transport
