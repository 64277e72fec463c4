// The bytes a connection that moved back from RDMA to TCP still owes its application before the
// kernel's: what the peer had sent on the stream and this side had not read when it moved
// (docs/architecture.md, "Back to TCP"). Plain process memory: a forked child gets a copy.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace tcp2rdma::preload {

class TcpPrefix {
 public:
  // `then_end`: the peer's sending side had ended on the stream: after the bytes, reads find the end
  // of the stream, whatever the kernel socket holds.
  void set(std::vector<uint8_t> bytes, bool then_end);
  // Something to report before the kernel: bytes, or the end after them. One load, for every call.
  bool present() const noexcept { return present_.load(std::memory_order_acquire); }
  // Copies the next bytes into iov (and consumes them unless `peek`); *at_end: none are left and the
  // end follows.
  size_t take(const iovec* iov, int iovcnt, bool peek, bool* at_end);
  size_t size() const;
  bool then_end() const;

 private:
  mutable std::mutex mu_;
  std::vector<uint8_t> bytes_;
  size_t pos_ = 0;
  bool then_end_ = false;
  std::atomic<bool> present_{false};
};

}  // namespace tcp2rdma::preload
