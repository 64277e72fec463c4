// HELLO and ACK on the stream: the first half of the byte-exact switch (docs/architecture.md, "The
// byte-exact switch"), where each side learns how many application bytes the other wrote on TCP
// before it froze, and where the decision to go on, stay on TCP or reset is made.
#pragma once

#include <cstdint>
#include <string>

#include "deadline.h"
#include "upgrade/switch_frames.h"

namespace tcp2rdma::transport {
class RdmaStream;
}

namespace tcp2rdma::preload {

// What a step of the switch came to: go on; stay on TCP (nothing was written anywhere either
// application reads); or reset the connection (the two byte counts are split).
struct SwitchStep {
  enum Kind { kGoOn, kStaysTcp, kBroken } kind = kGoOn;
  const char* why = "";
  std::string detail = {};  // what the TCP side saw, when it was TCP that failed
};

// Sends our HELLO, reads the peer's (until `deadline`), sends our ACK of it and reads the peer's ACK
// of ours (until `ack_deadline`, which must not be earlier). On kGoOn, *peer is the peer's HELLO and
// *tail how many of its TCP bytes this side has still to read (at most `tail_cap`).
//
// Until this side has sent its ACK the peer writes no record, and neither has this side: a failure up
// to there leaves the TCP connection as it was (kStaysTcp). After it, a missing ACK splits the
// counts (kBroken), unless the peer ended the stream with an abort before any byte of its ACK: it
// gave up before its ACK (it never had our HELLO in time, or could not send its ACK), which only
// ever leaves it on TCP, and RC's order puts an ACK it had sent before that abort. Then this side
// stays on TCP too. The ACK's wait is the longer one so that a peer whose HELLO wait ran out on a
// stalled link is heard giving up, instead of both resetting a connection TCP would have kept.
//
// A client's HELLO may have gone ahead in its channel's open (`in_open`: what it said, before the
// client froze; docs/links.md, "Short-lived connections"), and the server answers it at once. When
// the frozen counts say the same, the client does not send it again: the switch takes two round
// trips from the open. When they do not (the application wrote meanwhile), the client restates its
// HELLO on the stream, once, before its ACK; the server, whose client's HELLO came in the open
// (RdmaStream::first_bytes_in_open), takes it in place of its client's ACK, ACKs it too, and then
// reads the ACK. The client skips the server's ACK of the first. Neither side writes a record before
// the exchange with the restated count is over, so the first count binds nobody. An open's HELLO
// below what the server has read already is behind (not impossible): ACKed as it is, it must be
// restated; an ACK in the restatement's place splits the counts (kBroken).
SwitchStep exchange_counts(transport::RdmaStream& stream, const Hello& ours, uint64_t received, bool is_client,
                           uint64_t tail_cap, transport::Deadline deadline, transport::Deadline ack_deadline,
                           const Hello* in_open, Hello* peer, uint64_t* tail);

}  // namespace tcp2rdma::preload
