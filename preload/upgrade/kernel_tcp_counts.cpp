#include "upgrade/kernel_tcp_counts.h"

// linux/tcp.h, not netinet/tcp.h: glibc's struct tcp_info stops before the byte counts.
#include <linux/sockios.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <linux/tcp.h>
#include <sys/socket.h>

#include <cstddef>

#include "libc/real_calls.h"
#include "util/saved_errno.h"

namespace tcp2rdma::preload {
namespace {
// The kernel's TCP states (include/net/tcp_states.h), which no header of user space beside
// linux/tcp.h's struct tcp_info names.
constexpr uint8_t kEstablished = 1, kFinWait1 = 4, kFinWait2 = 5, kCloseWait = 8;
}  // namespace

bool kernel_tcp_counts(int fd, KernelTcpCounts* out) noexcept {
  SavedErrno keep;
  tcp_info info{};
  socklen_t len = sizeof info;
  if (real().getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return false;
  // A kernel older than the counts (4.1 and 4.2 added them) returns a shorter struct.
  if (len < offsetof(tcp_info, tcpi_bytes_received) + sizeof info.tcpi_bytes_received) return false;
  int unacked = 0, unread = 0;
  if (real().ioctl(fd, SIOCOUTQ, &unacked) != 0 || real().ioctl(fd, SIOCINQ, &unread) != 0) return false;
  if (unacked < 0 || unread < 0 || static_cast<uint64_t>(unread) > info.tcpi_bytes_received) return false;
  // A FIN takes a sequence number, which the counts take in: ours once it is queued, the peer's once
  // it arrived (SIOCINQ already leaves it out of what waits to be read). In the states past these
  // (a socket closed both ways) which FIN went where is not known: no counts.
  bool fin_sent, fin_received;
  switch (info.tcpi_state) {
    case kEstablished: fin_sent = false, fin_received = false; break;
    case kCloseWait: fin_sent = false, fin_received = true; break;
    case kFinWait1:
    case kFinWait2: fin_sent = true, fin_received = false; break;
    default: return false;
  }
  out->written = info.tcpi_bytes_acked + static_cast<uint64_t>(unacked) - (fin_sent ? 1 : 0);
  out->read = info.tcpi_bytes_received - static_cast<uint64_t>(unread) - (fin_received ? 1 : 0);
  return true;
}

}  // namespace tcp2rdma::preload
