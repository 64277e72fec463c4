// iovec arithmetic shared by the calls that move part of a caller's buffers in one place and the
// rest in another (the switch onto RDMA, the move back to TCP).
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <vector>

namespace tcp2rdma::preload {

inline size_t iov_total(const iovec* iov, int iovcnt) {
  size_t n = 0;
  for (int i = 0; i < iovcnt; ++i) n += iov[i].iov_len;
  return n;
}

// The iovecs after the first `done` bytes.
inline std::vector<iovec> iov_after(const iovec* iov, int iovcnt, size_t done) {
  std::vector<iovec> rest;
  for (int i = 0; i < iovcnt; ++i) {
    if (done >= iov[i].iov_len) {
      done -= iov[i].iov_len;
      continue;
    }
    rest.push_back({static_cast<char*>(iov[i].iov_base) + done, iov[i].iov_len - done});
    done = 0;
  }
  return rest;
}

}  // namespace tcp2rdma::preload
