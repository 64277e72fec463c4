#include "registry/tracked_socket.h"

#include "rdma_stream.h"
#include "registry/connection_path.h"
#include "util/log.h"

// How a stream whose last descriptor goes ends (tracked_socket.h): in order, or with a reset as the
// kernel's close would, and the log lines that say which when the peer could not tell why.
namespace tcp2rdma::preload {

namespace {
// SO_LINGER {on, 0 s}, or bytes the application never read: the kernel's close resets.
bool resets(const transport::Readiness& now, int linger_seconds) {
  return linger_seconds == 0 || now.bytes_readable > 0;
}
}  // namespace

bool ends_with_reset(transport::RdmaStream* s, int linger_seconds) noexcept {
  return resets(s->readiness(false), linger_seconds);
}

// ends_with_reset, and the log says so when the peer reads a reset (not for a stream whose writes went
// back to TCP, or one already failed): such an end is the application's, and its peer's log names only
// a reset or a broken protocol.
bool logged_reset_at_close(const TrackedSocket* socket, transport::RdmaStream* s, int linger_seconds) noexcept {
  transport::Readiness now = s->readiness(false);  // one look under the stream's lock, not two
  if (!resets(now, linger_seconds)) return false;
  if (!s->writes_moved() && !now.failed) {
    log_line("%s: closed %s: the peer reads a reset, as after the kernel's close", connection_label(socket),
             linger_seconds == 0 ? "with SO_LINGER 0" : "with the peer's bytes unread");
  }
  return true;
}

void log_unclean_end(const transport::RdmaStream* s, transport::Status closed) noexcept {
  // Nothing else logs an end found broken at close, and the peer's log names only what it read: a
  // reset, or a release before our end (the release goes alone when the close could not).
  if (closed == transport::Status::kTimeout) {
    log_line("a closed connection's end was not acknowledged in time (its timeout or linger): the peer reads a "
             "reset");
  } else if (closed == transport::Status::kProtocolError) {
    log_line("a closed connection's stream had failed (%s): the peer reads a reset", s->failure_detail().c_str());
  }
}

void end_stream(transport::RdmaStream* s, int linger_seconds) noexcept {
  if (ends_with_reset(s, linger_seconds)) {
    s->abort();
  } else {
    log_unclean_end(s, s->close());
  }
}

}  // namespace tcp2rdma::preload
