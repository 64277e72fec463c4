// One connection's failover when its RDMA path failed (docs/protocol.md, "When the RDMA path fails"):
// the stream's path is stopped, each side writes its failover record on TCP and reads the peer's,
// each resends on TCP what the peer lacks while reading the peer's resend, and the connection goes on
// over TCP at the exact byte offset. A state machine that never blocks: the path watcher
// (path_watcher.h) runs a step whenever the TCP socket is ready for what the step waits for, so one
// thread fails over any number of connections at once, and two processes failing over many
// connections to each other never wait on each other's order.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "back_to_tcp/failover_record.h"
#include "rdma_stream.h"
#include "registry/tracked_socket.h"

namespace tcp2rdma::preload {

// No failover can happen for `socket` (on Path::kFailingOver): its stream is reset after all, with
// `s` (kReset or kTimeout), the connection goes back to its (failed) stream, and the log says why.
void reset_instead_of_failover(TrackedSocket* socket, transport::Status s, const std::string& why) noexcept;

class Failover {
 public:
  // `socket` is on Path::kFailingOver and stays held until the failover is over; `tcp` is the
  // failover's own descriptor of it (a dup, closed with the Failover: the connection outlives an
  // application close() until its resend is out, as kernel TCP delivers a closed socket's bytes, and
  // the application's descriptor number may name another socket by then). Stops the stream's path
  // (bounded by the stream's timeout).
  Failover(SocketHold socket, int tcp);
  ~Failover();
  Failover(const Failover&) = delete;
  Failover& operator=(const Failover&) = delete;

  // Does whatever can be done now without waiting. Returns the poll(2) events the next step waits
  // for on tcp() (POLLIN, POLLOUT), or 0 once the failover is over: the connection is on TCP, or the
  // stream was reset after all. POLLPRI: waiting for the peer's kernel to acknowledge all of ours,
  // which no event announces; step again soon (a reset shows as an error event meanwhile).
  short step();
  bool awaiting_acknowledgement() const { return phase_ == Phase::kConfirm; }
  int tcp() const { return tcp_; }
  // Everything of ours is out and acknowledged by the peer's kernel, and the peer's record or resend
  // is not all here: its module may never answer (gone, or not watching). received() counts what
  // came, so that a watcher can tell a slow answer from none.
  bool waiting_for_answer() const;
  uint64_t received() const { return theirs_got_ + (unread_.size() - kept_from_stream_); }
  // The peer's kernel has had everything of ours for too long without an answer: the stream is reset.
  void give_up_unanswered();

 private:
  // kConfirm: both resends are done; the connection is handed to the application only once the
  // peer's kernel has acknowledged all of ours (confirm()).
  enum class Phase { kExchange, kResend, kConfirm, kOver };
  short exchange();
  short resend();
  short confirm();
  // Everything we wrote on tcp_ is acknowledged by the peer's kernel (SIOCOUTQ is 0).
  bool all_acknowledged() const;
  // The peer's record is whole: checks it, takes the unread bytes and our resend (leave_path).
  bool take_peer_record();
  void finish();
  // The failover cannot happen: the stream is reset after all (`s`: kReset or kTimeout), and so is
  // the TCP connection, so that the peer never waits for a record of ours.
  void give_up(transport::Status s, const std::string& why);
  // One non-blocking send or receive on tcp_; false (and the failover given up) when the connection
  // broke. *n gets what moved (0 when it would block).
  bool send_some(const uint8_t* data, size_t len, size_t* n);
  bool receive_some(uint8_t* data, size_t len, size_t* n);

  SocketHold socket_;
  transport::RdmaStream* stream_;
  int tcp_;
  Phase phase_ = Phase::kExchange;
  std::chrono::steady_clock::time_point started_;
  transport::RdmaStream::PathEnd end_;
  std::string reason_;  // why the path failed (the stream's words), for the log
  std::array<uint8_t, kFailoverSize> ours_{};
  std::array<uint8_t, kFailoverSize> theirs_{};
  size_t ours_sent_ = 0;
  size_t theirs_got_ = 0;
  std::vector<uint8_t> unread_;   // the peer's bytes left unread on the stream, then its resend
  size_t kept_from_stream_ = 0;   // how many of unread_ came from the stream
  std::vector<uint8_t> resend_;   // ours, from the peer's `received` on
  size_t resend_sent_ = 0;
  uint64_t coming_ = 0;           // bytes of the peer's resend still to read
};

}  // namespace tcp2rdma::preload
