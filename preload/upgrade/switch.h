// The byte-exact switch of a TCP connection onto its RDMA stream (docs/architecture.md, "The byte-exact
// switch"), once both peers have shown they run tcp2rdma: freeze, HELLO and ACK on the stream, the
// records on TCP, the peer's TCP tail read ahead of the stream's bytes.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "stats/stats_segment.h"
#include "upgrade/switch_frames.h"

namespace tcp2rdma::transport {
class RdmaStream;
}

namespace tcp2rdma::preload {

class TrackedSocket;
class UpgradeSession;

// What an upgrade attempt came to: `upgraded`, or the reason it stayed TCP (for the log line), and
// whether the TCP connection is still fit for use (false only when it failed half-way, after records).
struct UpgradeOutcome {
  bool upgraded = false;
  bool connection_usable = true;
  const char* why = "";
  stats::TcpReason reason = stats::TcpReason::kNoRdma;  // the category the stats count (docs/stats.md)
  std::string detail = {};  // the stream's own words on why it failed, when it did (rdma_stream.h)
  long setup_ms = 0;   // from the start until the RDMA connection was established
  long switch_ms = 0;  // the switch itself
};

// A client's new request when its server asked again (RdmaStream::peer_asked_again): a stream to the
// same server for the same connection, whose open carries `ours` (its counts, frozen), or null.
using AskAgain = std::function<std::unique_ptr<transport::RdmaStream>(const Hello& ours)>;

// Switches fd (socket) onto `stream`, which is established with the peer's tcp2rdma; on success the
// socket has its stream. The session's phase goes from on TCP to switching here (or the switch does
// not happen: the session was settled first). `in_open`: the HELLO a client's channel open carried
// (RdmaStream::first_bytes_in_open), else null. A server whose session a fork deferred before this
// asks its client again instead of aborting; a client asked so (`ask_again` set) makes one new
// request, its counts still frozen: the server's process forked between its answer and its switch,
// and the process that uses the connection now waits for that request.
UpgradeOutcome switch_onto(int fd, TrackedSocket* socket, UpgradeSession* session,
                           std::unique_ptr<transport::RdmaStream> stream, bool is_client, const Hello* in_open,
                           const AskAgain& ask_again = nullptr);

}  // namespace tcp2rdma::preload
