// The bytes of one write call: the caller's iovec array, read in order. A copy gathers as many of its
// pieces into one message as the room allows, so that writev and sendmsg (a server's reply header,
// body and trailer) cost one RDMA Write and one doorbell, as a single write of the same bytes does,
// where a message per piece cost one each (memcached's replies: three).
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tcp2rdma::transport {

class ByteSource {
 public:
  ByteSource(const iovec* iov, int count) : iov_(iov), count_(count) {
    for (int i = 0; i < count; ++i) left_ += iov[i].iov_len;
    skip_empty();
  }

  size_t left() const { return left_; }
  // Whether what is left is one piece of the caller's memory (a zero-copy write needs one).
  bool one_piece() const { return left_ == 0 || left_ == iov_[index_].iov_len - offset_; }
  // Where the next byte is.
  const uint8_t* here() const { return static_cast<const uint8_t*>(iov_[index_].iov_base) + offset_; }

  // Moves past n bytes (n <= left()).
  void skip(size_t n) {
    left_ -= n;
    while (n > 0) {
      size_t in_piece = iov_[index_].iov_len - offset_;
      size_t step = n < in_piece ? n : in_piece;
      offset_ += step;
      n -= step;
      skip_empty();
    }
  }
  // Copies the next n bytes (n <= left()) to dst, moving past them.
  void copy_to(uint8_t* dst, size_t n) {
    left_ -= n;
    while (n > 0) {
      size_t in_piece = iov_[index_].iov_len - offset_;
      size_t step = n < in_piece ? n : in_piece;
      std::memcpy(dst, here(), step);
      dst += step;
      offset_ += step;
      n -= step;
      skip_empty();
    }
  }

 private:
  // To the next piece with bytes, when this one is used up.
  void skip_empty() {
    while (index_ < count_ && offset_ == iov_[index_].iov_len) {
      ++index_;
      offset_ = 0;
    }
  }

  const iovec* iov_;
  int count_;
  int index_ = 0;
  size_t offset_ = 0;
  size_t left_ = 0;
};

}  // namespace tcp2rdma::transport
