#include "back_to_tcp/failover.h"

#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "back_to_tcp/move_back.h"
#include "libc/real_calls.h"
#include "path_failover.h"
#include "registry/connection_path.h"
#include "util/log.h"
#include "util/nonce_pair.h"

namespace tcp2rdma::preload {

using transport::FailoverError;
using transport::Status;

Failover::Failover(SocketHold socket, int tcp)
    : socket_(std::move(socket)), stream_(socket_->own_stream()), tcp_(tcp),
      started_(std::chrono::steady_clock::now()) {
  end_ = stream_->stop_path();  // the queue pair is dead from here; every completion queued is taken
  reason_ = stream_->failure_detail();
  if (!stream_->path_failed()) {
    // Among the completions taken was the peer's abort or a broken protocol: its word, not the path's.
    give_up(Status::kReset, "the peer reset the stream");
    return;
  }
  FailoverRecord record;
  record.received = end_.received.received;
  record.sent = end_.sent.sent;
  record.write_shut = end_.write_shut;
  record.nonces = nonce_pair(stream_->client_nonce(), stream_->server_nonce());
  ours_ = encode_failover(record);
}

Failover::~Failover() {
  if (tcp_ >= 0) real().close(tcp_);
}

short Failover::step() {
  if (phase_ == Phase::kExchange) {
    short wanted = exchange();
    if (phase_ == Phase::kExchange) return wanted;
  }
  if (phase_ == Phase::kResend) {
    short wanted = resend();
    if (phase_ == Phase::kResend) return wanted;
  }
  if (phase_ == Phase::kConfirm) return confirm();
  return 0;
}

short Failover::exchange() {
  size_t n = 0;
  if (ours_sent_ < ours_.size()) {
    if (!send_some(ours_.data() + ours_sent_, ours_.size() - ours_sent_, &n)) return 0;
    ours_sent_ += n;
  }
  if (theirs_got_ < theirs_.size()) {
    if (!receive_some(theirs_.data() + theirs_got_, theirs_.size() - theirs_got_, &n)) return 0;
    if (n == 0 && errno == 0) {
      give_up(Status::kReset, "the peer's TCP connection ended instead of its failover record");
      return 0;
    }
    theirs_got_ += n;
  }
  if (ours_sent_ < ours_.size() || theirs_got_ < theirs_.size()) {
    return static_cast<short>(POLLIN | (ours_sent_ < ours_.size() ? POLLOUT : 0));
  }
  if (take_peer_record()) phase_ = Phase::kResend;
  return 0;
}

bool Failover::take_peer_record() {
  NoncePair nonces = nonce_pair(stream_->client_nonce(), stream_->server_nonce());
  std::optional<FailoverRecord> peer = decode_failover(theirs_, nonces);
  if (!peer) {
    give_up(Status::kReset, "the peer's failover record is not one for this connection");
    return false;
  }
  if (FailoverError e = transport::bytes_coming(end_.received, peer->sent, &coming_); e != FailoverError::kNone) {
    give_up(Status::kReset, std::string("the peer's failover record: ") + transport::to_string(e));
    return false;
  }
  FailoverError why = FailoverError::kNone;
  std::vector<uint8_t> unread;
  if (stream_->leave_path(peer->received, &unread, &resend_, &why) != Status::kOk) {
    give_up(Status::kReset, std::string("the peer's failover record: ") + transport::to_string(why));
    return false;
  }
  // The application reads what was left on the stream first, then the peer's resend, then TCP.
  unread_ = std::move(unread);
  kept_from_stream_ = unread_.size();
  unread_.reserve(unread_.size() + coming_);
  return true;
}

short Failover::resend() {
  size_t n = 0;
  if (resend_sent_ < resend_.size()) {
    if (!send_some(resend_.data() + resend_sent_, resend_.size() - resend_sent_, &n)) return 0;
    resend_sent_ += n;
  }
  // The peer's resend is read while ours goes out: two resends larger than TCP's buffers would
  // otherwise wait on each other for ever. Never more than it announced: what follows it is the
  // peer application's, for the application to read from the socket.
  while (coming_ > 0) {
    uint8_t chunk[16384];
    if (!receive_some(chunk, std::min<uint64_t>(coming_, sizeof chunk), &n)) return 0;
    if (n == 0 && errno == 0) {
      give_up(Status::kReset, "the peer's TCP connection ended during its resend");
      return 0;
    }
    if (n == 0) break;
    unread_.insert(unread_.end(), chunk, chunk + n);
    coming_ -= n;
  }
  if (resend_sent_ < resend_.size() || coming_ > 0) {
    return static_cast<short>((coming_ > 0 ? POLLIN : 0) | (resend_sent_ < resend_.size() ? POLLOUT : 0));
  }
  phase_ = Phase::kConfirm;
  return 0;
}

// A peer killed after it wrote its record, before ours came, has a record (and perhaps a resend) on
// its way to us followed by its kernel's end: read alone, that is a connection that failed over and
// then ended cleanly, while the dead side's application never read what its ring held (kernel TCP
// resets a connection closed with unread bytes). Its kernel answers our record with a reset instead
// of an acknowledgement, so the connection is the application's only once all of ours (record,
// resend) is acknowledged: a live peer's module reads all of it.
short Failover::confirm() {
  tcp_info info{};
  socklen_t len = sizeof info;
  if (real().getsockopt(tcp_, IPPROTO_TCP, TCP_INFO, &info, &len) == 0 && info.tcpi_state == TCP_CLOSE) {
    int error = 0;
    len = sizeof error;
    (void)real().getsockopt(tcp_, SOL_SOCKET, SO_ERROR, &error, &len);
    give_up(error == ETIMEDOUT ? Status::kTimeout : Status::kReset,
            std::string("the TCP connection failed before the peer took our record and resend: ") +
                std::strerror(error != 0 ? error : ECONNRESET));
    return 0;
  }
  if (!all_acknowledged()) return POLLPRI;
  finish();
  return 0;
}

void Failover::finish() {
  size_t kept = unread_.size();
  if (!socket_->prefix.set(unread_, false)) {
    give_up(Status::kReset, "no memory for the peer's bytes to read first");
    return;
  }
  phase_ = Phase::kOver;
  // The prefix before the move: a call that finds the connection on TCP must find its bytes first.
  stream_->finish_leaving();
  // Our own descriptor, not the application's (see the constructor).
  complete_move_back(socket_.get(), tcp_, /*by_mover=*/true);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started_);
  transport::StreamCounters on_rdma = stream_->counters();
  log_line("%s: back on tcp (rdma path failed: %s; %zu bytes resent; %zu of the peer's kept to read first; "
           "%llu bytes sent and %llu read on rdma before; %lld ms)",
           connection_label(socket_.get()), reason_.c_str(), resend_.size(), kept,
           static_cast<unsigned long long>(on_rdma.bytes_sent), static_cast<unsigned long long>(on_rdma.bytes_received),
           static_cast<long long>(ms.count()));
}

bool Failover::waiting_for_answer() const {
  bool ours_out = phase_ == Phase::kExchange ? ours_sent_ == ours_.size() : resend_sent_ == resend_.size();
  bool theirs_due = phase_ == Phase::kExchange ? theirs_got_ < theirs_.size() : coming_ > 0;
  return phase_ != Phase::kOver && ours_out && theirs_due && all_acknowledged();
}

bool Failover::all_acknowledged() const {
  int unacknowledged = 0;
  return real().ioctl(tcp_, SIOCOUTQ, &unacknowledged) == 0 && unacknowledged == 0;
}

void Failover::give_up_unanswered() {
  give_up(Status::kTimeout, "the peer's tcp2rdma stopped answering the failover");
}

void reset_instead_of_failover(TrackedSocket* socket, Status s, const std::string& why) noexcept {
  transport::RdmaStream* stream = socket->own_stream();
  std::string reason = stream != nullptr ? stream->failure_detail() : "";
  if (stream != nullptr) stream->give_up_path(s, why.c_str());
  socket->move_path(Path::kFailingOver, Path::kRdma);  // on the stream, which reports the reset
  log_line("%s: reset (rdma path failed: %s; no failover: %s)", connection_label(socket), reason.c_str(), why.c_str());
}

void Failover::give_up(Status s, const std::string& why) {
  phase_ = Phase::kOver;
  reset_connection(tcp_);  // the peer, if it is there, must not wait for our record or resend
  reset_instead_of_failover(socket_.get(), s, why);
}

bool Failover::send_some(const uint8_t* data, size_t len, size_t* n) {
  *n = 0;
  ssize_t r = real().send(tcp_, data, len, MSG_DONTWAIT | MSG_NOSIGNAL);
  if (r >= 0) {
    *n = static_cast<size_t>(r);
    return true;
  }
  if (errno == EAGAIN || errno == EINTR) return true;
  give_up(errno == ETIMEDOUT ? Status::kTimeout : Status::kReset,
          std::string("the TCP connection failed: ") + std::strerror(errno));
  return false;
}

bool Failover::receive_some(uint8_t* data, size_t len, size_t* n) {
  *n = 0;
  ssize_t r = real().recv(tcp_, data, len, MSG_DONTWAIT);
  if (r > 0) {
    *n = static_cast<size_t>(r);
    return true;
  }
  if (r == 0) {
    errno = 0;  // the end: the caller says which record or resend it cut short
    return true;
  }
  if (errno == EAGAIN || errno == EINTR) return true;
  give_up(errno == ETIMEDOUT ? Status::kTimeout : Status::kReset,
          std::string("the TCP connection failed: ") + std::strerror(errno));
  return false;
}

}  // namespace tcp2rdma::preload
