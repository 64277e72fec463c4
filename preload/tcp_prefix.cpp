#include "tcp_prefix.h"

#include <cstring>

namespace tcp2rdma::preload {

void TcpPrefix::set(std::vector<uint8_t> bytes, bool then_end) {
  std::lock_guard lock(mu_);
  bytes_ = std::move(bytes);
  pos_ = 0;
  then_end_ = then_end;
  present_.store(then_end_ || !bytes_.empty(), std::memory_order_release);
}

size_t TcpPrefix::take(const iovec* iov, int iovcnt, bool peek, bool* at_end) {
  std::lock_guard lock(mu_);
  size_t copied = 0;
  for (int i = 0; i < iovcnt && pos_ + copied < bytes_.size(); ++i) {
    size_t n = std::min(iov[i].iov_len, bytes_.size() - pos_ - copied);
    std::memcpy(iov[i].iov_base, bytes_.data() + pos_ + copied, n);
    copied += n;
  }
  if (!peek) pos_ += copied;
  if (pos_ == bytes_.size()) {
    std::vector<uint8_t>().swap(bytes_);
    pos_ = 0;
    present_.store(then_end_, std::memory_order_release);
  }
  *at_end = bytes_.empty() && then_end_;
  return copied;
}

bool TcpPrefix::then_end() const {
  std::lock_guard lock(mu_);
  return then_end_;
}

size_t TcpPrefix::size() const {
  std::lock_guard lock(mu_);
  return bytes_.size() - pos_;
}

}  // namespace tcp2rdma::preload
