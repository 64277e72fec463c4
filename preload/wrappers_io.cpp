// Data transfer. A descriptor whose stream has not moved to RDMA is the kernel socket itself, so each
// call goes straight to libc. The _chk variants forward to libc's own, which performs the buffer check.
#include "interposed.h"

using tcp2rdma::preload::real;

T2R_INTERPOSE ssize_t read(int fd, void* buf, size_t n) { return real().read(fd, buf, n); }

T2R_INTERPOSE ssize_t __read_chk(int fd, void* buf, size_t n, size_t buflen) {
  return real().__read_chk(fd, buf, n, buflen);
}

T2R_INTERPOSE ssize_t readv(int fd, const struct iovec* iov, int iovcnt) { return real().readv(fd, iov, iovcnt); }

T2R_INTERPOSE ssize_t recv(int fd, void* buf, size_t n, int flags) { return real().recv(fd, buf, n, flags); }

T2R_INTERPOSE ssize_t __recv_chk(int fd, void* buf, size_t n, size_t buflen, int flags) {
  return real().__recv_chk(fd, buf, n, buflen, flags);
}

T2R_INTERPOSE ssize_t recvfrom(int fd, void* buf, size_t n, int flags, struct sockaddr* addr, socklen_t* len) {
  return real().recvfrom(fd, buf, n, flags, addr, len);
}

T2R_INTERPOSE ssize_t __recvfrom_chk(int fd, void* buf, size_t n, size_t buflen, int flags, struct sockaddr* addr,
                                     socklen_t* len) {
  return real().__recvfrom_chk(fd, buf, n, buflen, flags, addr, len);
}

T2R_INTERPOSE ssize_t recvmsg(int fd, struct msghdr* msg, int flags) { return real().recvmsg(fd, msg, flags); }

T2R_INTERPOSE int recvmmsg(int fd, struct mmsghdr* vec, unsigned int vlen, int flags, struct timespec* timeout) {
  return real().recvmmsg(fd, vec, vlen, flags, timeout);
}

T2R_INTERPOSE ssize_t write(int fd, const void* buf, size_t n) { return real().write(fd, buf, n); }

T2R_INTERPOSE ssize_t writev(int fd, const struct iovec* iov, int iovcnt) { return real().writev(fd, iov, iovcnt); }

T2R_INTERPOSE ssize_t send(int fd, const void* buf, size_t n, int flags) { return real().send(fd, buf, n, flags); }

T2R_INTERPOSE ssize_t sendto(int fd, const void* buf, size_t n, int flags, const struct sockaddr* addr,
                             socklen_t len) {
  return real().sendto(fd, buf, n, flags, addr, len);
}

T2R_INTERPOSE ssize_t sendmsg(int fd, const struct msghdr* msg, int flags) { return real().sendmsg(fd, msg, flags); }

T2R_INTERPOSE int sendmmsg(int fd, struct mmsghdr* vec, unsigned int vlen, int flags) {
  return real().sendmmsg(fd, vec, vlen, flags);
}

T2R_INTERPOSE ssize_t sendfile(int out_fd, int in_fd, off_t* offset, size_t count) {
  return real().sendfile(out_fd, in_fd, offset, count);
}

T2R_INTERPOSE ssize_t sendfile64(int out_fd, int in_fd, off64_t* offset, size_t count) {
  return real().sendfile64(out_fd, in_fd, offset, count);
}
