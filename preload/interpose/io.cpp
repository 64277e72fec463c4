// Data transfer. A descriptor whose connection has not moved to RDMA is the kernel socket itself, so
// each call goes straight to libc after one table lookup. An upgraded one goes to its stream
// (stream_calls.h). The _chk variants check the buffer as libc's own do, then take the same path.
// The route is held until the wrapper returns, across the kernel's call too: on a connection back on
// TCP whose return to RDMA is planned, that call is counted while it lasts (StreamRef::counted_on_tcp).
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "data/stream_calls.h"
#include "process/descriptor_passing.h"
#include "libc/interposed.h"

using tcp2rdma::preload::real;
using tcp2rdma::preload::stream_recv;
using tcp2rdma::preload::stream_send;
using tcp2rdma::preload::route_for_call;

namespace {

[[noreturn]] void buffer_overflow() {
  // What glibc's __chk_fail does: the program asked for more than its buffer holds.
  std::abort();
}

ssize_t recv_one(const tcp2rdma::preload::StreamRef& s, int fd, void* buf, size_t n, int flags) {
  iovec iov{buf, n};
  return stream_recv(s, fd, &iov, 1, flags);
}

ssize_t send_one(const tcp2rdma::preload::StreamRef& s, int fd, const void* buf, size_t n, int flags) {
  iovec iov{const_cast<void*>(buf), n};
  return stream_send(s, fd, &iov, 1, flags);
}

}  // namespace

T2R_INTERPOSE ssize_t read(int fd, void* buf, size_t n) {
  auto s = route_for_call(fd, tcp2rdma::preload::CallUse::kRead);
  if (s.ours()) return recv_one(s, fd, buf, n, 0);
  return real().read(fd, buf, n);
}

T2R_INTERPOSE ssize_t __read_chk(int fd, void* buf, size_t n, size_t buflen) {
  auto s = route_for_call(fd, tcp2rdma::preload::CallUse::kRead);
  if (s.ours()) {
    if (n > buflen) buffer_overflow();
    return recv_one(s, fd, buf, n, 0);
  }
  return real().__read_chk(fd, buf, n, buflen);
}

T2R_INTERPOSE ssize_t readv(int fd, const struct iovec* iov, int iovcnt) {
  auto s = route_for_call(fd, tcp2rdma::preload::CallUse::kRead);
  if (s.ours()) return stream_recv(s, fd, iov, iovcnt, 0);
  return real().readv(fd, iov, iovcnt);
}

T2R_INTERPOSE ssize_t recv(int fd, void* buf, size_t n, int flags) {
  auto s = route_for_call(fd, tcp2rdma::preload::CallUse::kRead);
  if (s.ours()) return recv_one(s, fd, buf, n, flags);
  return real().recv(fd, buf, n, flags);
}

T2R_INTERPOSE ssize_t __recv_chk(int fd, void* buf, size_t n, size_t buflen, int flags) {
  auto s = route_for_call(fd, tcp2rdma::preload::CallUse::kRead);
  if (s.ours()) {
    if (n > buflen) buffer_overflow();
    return recv_one(s, fd, buf, n, flags);
  }
  return real().__recv_chk(fd, buf, n, buflen, flags);
}

T2R_INTERPOSE ssize_t recvfrom(int fd, void* buf, size_t n, int flags, struct sockaddr* addr, socklen_t* len) {
  // A connected TCP socket reports no source address: *len is left alone, as the kernel does.
  auto s = route_for_call(fd, tcp2rdma::preload::CallUse::kRead);
  if (s.ours()) return recv_one(s, fd, buf, n, flags);
  return real().recvfrom(fd, buf, n, flags, addr, len);
}

T2R_INTERPOSE ssize_t __recvfrom_chk(int fd, void* buf, size_t n, size_t buflen, int flags, struct sockaddr* addr,
                                     socklen_t* len) {
  auto s = route_for_call(fd, tcp2rdma::preload::CallUse::kRead);
  if (s.ours()) {
    if (n > buflen) buffer_overflow();
    return recv_one(s, fd, buf, n, flags);
  }
  return real().__recvfrom_chk(fd, buf, n, buflen, flags, addr, len);
}

T2R_INTERPOSE ssize_t recvmsg(int fd, struct msghdr* msg, int flags) {
  auto s = route_for_call(fd, tcp2rdma::preload::CallUse::kRead);
  if (s.ours()) {
    msg->msg_namelen = 0;
    msg->msg_controllen = 0;
    msg->msg_flags = 0;
    return stream_recv(s, fd, msg->msg_iov, static_cast<int>(msg->msg_iovlen), flags);
  }
  return real().recvmsg(fd, msg, flags);
}

T2R_INTERPOSE int recvmmsg(int fd, struct mmsghdr* vec, unsigned int vlen, int flags, struct timespec* timeout) {
  auto s = route_for_call(fd, tcp2rdma::preload::CallUse::kRead);
  if (s.ours()) {
    // On a stream socket every message but the first would only split the same bytes: take one.
    if (vlen == 0) return 0;
    ssize_t n = stream_recv(s, fd, vec[0].msg_hdr.msg_iov, static_cast<int>(vec[0].msg_hdr.msg_iovlen),
                            flags & ~MSG_WAITFORONE);
    if (n < 0) return -1;
    vec[0].msg_len = static_cast<unsigned>(n);
    return 1;
  }
  return real().recvmmsg(fd, vec, vlen, flags, timeout);
}

T2R_INTERPOSE ssize_t write(int fd, const void* buf, size_t n) {
  auto s = route_for_call(fd);
  if (s.ours()) return send_one(s, fd, buf, n, 0);
  return real().write(fd, buf, n);
}

T2R_INTERPOSE ssize_t writev(int fd, const struct iovec* iov, int iovcnt) {
  auto s = route_for_call(fd);
  if (s.ours()) return stream_send(s, fd, iov, iovcnt, 0);
  return real().writev(fd, iov, iovcnt);
}

T2R_INTERPOSE ssize_t send(int fd, const void* buf, size_t n, int flags) {
  auto s = route_for_call(fd);
  if (s.ours()) return send_one(s, fd, buf, n, flags);
  return real().send(fd, buf, n, flags);
}

T2R_INTERPOSE ssize_t sendto(int fd, const void* buf, size_t n, int flags, const struct sockaddr* addr,
                             socklen_t len) {
  // Linux TCP ignores a destination on a connected socket (rsocket's EISCONN broke sockperf): so do we.
  auto s = route_for_call(fd);
  if (s.ours()) return send_one(s, fd, buf, n, flags);
  return real().sendto(fd, buf, n, flags, addr, len);
}

T2R_INTERPOSE ssize_t sendmsg(int fd, const struct msghdr* msg, int flags) {
  auto s = route_for_call(fd);
  if (s.ours()) return stream_send(s, fd, msg->msg_iov, static_cast<int>(msg->msg_iovlen), flags);
  if (msg != nullptr && msg->msg_controllen != 0) tcp2rdma::preload::before_passing_descriptors(fd, msg);
  return real().sendmsg(fd, msg, flags);
}

T2R_INTERPOSE int sendmmsg(int fd, struct mmsghdr* vec, unsigned int vlen, int flags) {
  auto s = route_for_call(fd);
  if (s.ours()) {
    unsigned sent = 0;
    for (; sent < vlen; ++sent) {
      ssize_t n = stream_send(s, fd, vec[sent].msg_hdr.msg_iov, static_cast<int>(vec[sent].msg_hdr.msg_iovlen), flags);
      if (n < 0) return sent > 0 ? static_cast<int>(sent) : -1;
      vec[sent].msg_len = static_cast<unsigned>(n);
    }
    return static_cast<int>(sent);
  }
  for (unsigned i = 0; vec != nullptr && i < vlen; ++i) {
    if (vec[i].msg_hdr.msg_controllen != 0) tcp2rdma::preload::before_passing_descriptors(fd, &vec[i].msg_hdr);
  }
  return real().sendmmsg(fd, vec, vlen, flags);
}

namespace {

// sendfile to an upgraded socket, or one whose upgrade is under way: read the file through a buffer
// and send it (the kernel's page-cache path does not reach an RDMA stream, nor counts the bytes).
// The file's bytes are consumed only as far as they were sent, as the kernel's sendfile consumes
// them: a seekable file is read at an offset (pread) and its position, without `offset`, moved by
// what went; a pipe cannot be read back, so what was read from it is sent whole, waiting for room
// even on a non-blocking socket (bytes read from a pipe and not sent would be lost).
template <typename Off>
ssize_t sendfile_to_stream(const tcp2rdma::preload::StreamRef& s, int out_fd, int in_fd, Off* offset, size_t count) {
  static thread_local std::vector<char> buf(256 * 1024);
  off_t start = offset != nullptr ? static_cast<off_t>(*offset) : lseek(in_fd, 0, SEEK_CUR);
  const bool seekable = start >= 0;
  size_t total = 0;
  while (total < count) {
    size_t want = std::min(count - total, buf.size());
    ssize_t got = seekable ? pread(in_fd, buf.data(), want, start + static_cast<off_t>(total))
                           : real().read(in_fd, buf.data(), want);
    if (got < 0) {
      if (total > 0) break;
      return -1;
    }
    if (got == 0) break;
    size_t sent = 0;
    while (sent < static_cast<size_t>(got)) {
      ssize_t n = send_one(s, out_fd, buf.data() + sent, static_cast<size_t>(got) - sent, 0);
      if (n < 0 && errno == EAGAIN && !seekable) {
        pollfd p{out_fd, POLLOUT, 0};
        poll(&p, 1, -1);  // the module's poll: the stream's readiness
        continue;
      }
      if (n < 0) break;
      sent += static_cast<size_t>(n);
      if (seekable) break;  // what did not go stays in the file, read again by the caller's retry
    }
    total += sent;
    if (sent == 0 && total == 0) return -1;  // nothing went: errno is the send's
    if (sent < static_cast<size_t>(got)) break;  // full (non-blocking), or failed after some bytes
  }
  if (offset != nullptr) {
    *offset += static_cast<Off>(total);
  } else if (seekable) {
    lseek(in_fd, start + static_cast<off_t>(total), SEEK_SET);
  }
  return static_cast<ssize_t>(total);
}

}  // namespace

T2R_INTERPOSE ssize_t sendfile(int out_fd, int in_fd, off_t* offset, size_t count) {
  auto s = route_for_call(out_fd);
  if (s.ours()) return sendfile_to_stream(s, out_fd, in_fd, offset, count);
  return real().sendfile(out_fd, in_fd, offset, count);
}

T2R_INTERPOSE ssize_t sendfile64(int out_fd, int in_fd, off64_t* offset, size_t count) {
  auto s = route_for_call(out_fd);
  if (s.ours()) return sendfile_to_stream(s, out_fd, in_fd, offset, count);
  return real().sendfile64(out_fd, in_fd, offset, count);
}
