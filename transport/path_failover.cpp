#include "path_failover.h"

namespace tcp2rdma::transport {
namespace {

// Whether x lies in [from, to], the interval running forward from `from` (modulo 2^64).
bool within(uint64_t x, uint64_t from, uint64_t to) { return x - from <= to - from; }

}  // namespace

const char* to_string(FailoverError e) {
  switch (e) {
    case FailoverError::kNone:
      return "none";
    case FailoverError::kReceivedImpossible:
      return "the peer claims to have received bytes we never sent, or fewer than it consumed";
    case FailoverError::kNotRetained:
      return "the peer lacks bytes we no longer hold";
    case FailoverError::kSentImpossible:
      return "the peer claims a stream end before what we received, or beyond our ring";
  }
  return "?";
}

FailoverError bytes_to_resend(const SentCursors& ours, uint64_t peer_received, uint64_t* resend) {
  *resend = 0;
  if (!within(peer_received, ours.peer_consumed, ours.sent)) return FailoverError::kReceivedImpossible;
  if (!within(peer_received, ours.retained_from, ours.sent)) return FailoverError::kNotRetained;
  *resend = ours.sent - peer_received;
  return FailoverError::kNone;
}

FailoverError bytes_coming(const ReceivedCursors& ours, uint64_t peer_sent, uint64_t* coming) {
  *coming = 0;
  if (!within(peer_sent, ours.received, ours.consumed + ours.ring_size)) return FailoverError::kSentImpossible;
  *coming = peer_sent - ours.received;
  return FailoverError::kNone;
}

}  // namespace tcp2rdma::transport
